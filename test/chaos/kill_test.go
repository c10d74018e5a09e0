//go:build linux

package chaos

import (
	"testing"
	"time"

	"github.com/locateanything/detect/internal/freeport"
)

// TestWorkerKill9EmbeddedNATS: the single-machine default. The worker runs its own NATS
// server, so kill -9 takes the queue down with it; the store persists in LA_DATA_DIR and
// the restarted worker (same directory, same port) finishes every job, including those the
// dead one held. Bounded: 60 jobs, one kill; full: 400 jobs, three kills.
func TestWorkerKill9EmbeddedNATS(t *testing.T) {
	s := newScene(t)
	addr := freeport.MustAddr(t)
	w := s.worker("w1", map[string]string{"LA_NATS_LISTEN": addr})
	w.start(t)
	s.connect("nats://" + addr)
	s.mustPublishGood("emb", 0, size.jobs)
	for k := 1; k <= size.kills; k++ {
		s.waitResults(k*size.jobs/(size.kills+1), 3*time.Minute)
		w.kill9(t)
		w.start(t)
	}
	s.account(3 * time.Minute)
	w.checkLog(t)
}

// TestWorkerKill9ExternalNATS: two workers share one external nats-server; one is killed
// with kill -9 mid-run (its held jobs come back after LA_ACK_WAIT and the other worker runs
// them), and comes back later. Bounded: 60 jobs, one kill; full: 400 jobs, three kills.
func TestWorkerKill9ExternalNATS(t *testing.T) {
	s := newScene(t)
	n := startNATS(t, s.ps, s.dir)
	w1 := s.worker("w1", map[string]string{"LA_NATS_URL": n.url()})
	w2 := s.worker("w2", map[string]string{"LA_NATS_URL": n.url()})
	w1.start(t)
	w2.start(t)
	s.connect(n.url())
	s.mustPublishGood("ext", 0, size.jobs)
	for k := 1; k <= size.kills; k++ {
		s.waitResults(k*size.jobs/(size.kills+1), 3*time.Minute)
		w1.kill9(t)
		time.Sleep(time.Second) // w2 alone for a moment
		w1.start(t)
	}
	s.account(3 * time.Minute)
	w1.checkLog(t)
	w2.checkLog(t)
}
