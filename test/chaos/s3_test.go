//go:build linux

package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/internal/freeport"
)

// TestS3StoppedAndFrozen: images and results live in S3 (versitygw). Mid-run the S3 server
// is killed and restarted on the same port after a pause (connection refused meanwhile),
// and later frozen with SIGSTOP (connections hang: the worst case for a client) and
// thawed with SIGCONT. Every job must still succeed: the outages are shorter than the
// retry budget (LA_OP_TIMEOUT 5 s per call, 20 deliveries). Bounded: 60 jobs, 2 s stopped,
// 5 s frozen; full: 400 jobs, 10 s stopped, 20 s frozen.
func TestS3StoppedAndFrozen(t *testing.T) {
	s := newScene(t)
	s.useS3()
	addr := freeport.MustAddr(t)
	w := s.worker("w1", map[string]string{"LA_NATS_LISTEN": addr})
	w.start(t)
	s.connect("nats://" + addr)
	s.mustPublishGood("s3", 0, size.jobs)

	s.waitResults(size.jobs/6, 3*time.Minute)
	s.s3.kill9(t)
	time.Sleep(size.s3Down)
	s.s3.start(t)

	s.waitResults(size.jobs/2, 3*time.Minute)
	s.s3.freeze(t)
	time.Sleep(size.s3Freeze)
	s.s3.thaw(t)

	s.account(3 * time.Minute)
	w.checkLog(t)
	t.Logf("transient failures the worker retried: %d", strings.Count(w.log(t), "job failed for now; will retry"))
}
