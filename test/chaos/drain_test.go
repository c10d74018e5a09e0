//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// TestSIGTERMDrain: SIGTERM while a job runs, with an external nats-server so the queue
// outlives the worker. The jobs take about a second each (a photograph at a 1024-patch
// budget). The worker must exit 0 and leave nothing to LA_ACK_WAIT: with a long LA_GRACE
// (60 s) the running and the prefetched job finish in the drain and nothing is given back;
// with a short one (10 ms) they are cut off and given back at once (nak without delay),
// and run again on the next worker (attempt 2). A second worker then finishes everything.
// Both forms run both cases.
func TestSIGTERMDrain(t *testing.T) {
	t.Run("long_grace", func(t *testing.T) { sigtermDrain(t, "60s", true) })
	t.Run("short_grace", func(t *testing.T) { sigtermDrain(t, "10ms", false) })
}

func sigtermDrain(t *testing.T, grace string, finishes bool) {
	s := newScene(t)
	photo, err := os.ReadFile(photoJPG)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.images, "person.jpg"), photo, 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNATS(t, s.ps, s.dir)
	w := s.worker("w1", map[string]string{"LA_NATS_URL": n.url(), "LA_GRACE": grace, "LA_IN_TOKEN_LIMIT": "1024"})
	w.start(t)
	s.connect(n.url())
	for i := range 6 {
		j := jobs.Job{ID: fmt.Sprintf("slow-%d", i), Image: "file://" + filepath.Join(s.images, "person.jpg"), Query: "person"}
		if err := s.led.submitJob(s.c, j, s.results, succeeded); err != nil {
			t.Fatal(err)
		}
	}
	running := s.waitRunning()
	code, took := w.term(t, 90*time.Second)
	t.Logf("LA_GRACE=%s, SIGTERM while %s ran: exit %d after %s", grace, running, code, took.Round(time.Millisecond))
	if code != 0 || took > 30*time.Second {
		t.Errorf("SIGTERM with LA_GRACE=%s: exit %d after %s; want exit 0 once the held jobs finished or were given back", grace, code, took)
	}
	s.checkGivenBack(!finishes)
	givenBack := strings.Contains(w.log(t), "job given back unfinished at shutdown")
	if givenBack == finishes {
		t.Errorf("LA_GRACE=%s: a job given back at shutdown: %v, want %v", grace, givenBack, !finishes)
	}
	w2 := s.worker("w2", map[string]string{"LA_NATS_URL": n.url()})
	w2.start(t)
	s.account(3 * time.Minute)
	b, err := s.read(context.Background(), jobs.ResultURL(s.results, running))
	var r jobs.Result
	if err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("result of %s: %v", running, err)
	}
	if finishes && (r.Worker != "w1" || r.Attempt != 1) {
		t.Errorf("%s ran when SIGTERM came and had %s to finish, but its result is from %s, attempt %d", running, grace, r.Worker, r.Attempt)
	}
	if !finishes && r.Attempt < 2 {
		t.Errorf("%s was cut off by the shutdown but its result says attempt %d", running, r.Attempt)
	}
	w.checkLog(t)
	w2.checkLog(t)
}

// waitRunning waits until some job's state is running and returns its id.
func (s *scene) waitRunning() string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv, err := s.c.js.KeyValue(ctx, jobs.StateBucket)
	if err != nil {
		s.t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			s.t.Fatal("no job started running within 2 minutes")
		case e := <-w.Updates():
			var st jobs.State
			if e != nil && json.Unmarshal(e.Value(), &st) == nil && st.Status == jobs.StatusRunning {
				return e.Key()
			}
		}
	}
}

// checkGivenBack checks, right after a worker exited, what it left in the consumer's
// hands: nothing at all when held is false (every held job finished in the drain);
// otherwise every message still unacknowledged must have been given back at once (a nak
// without delay), so that a fresh pull gets it now rather than after LA_ACK_WAIT (5 s). The
// test gives the messages it pulls straight back (nak) for the next worker.
func (s *scene) checkGivenBack(held bool) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := s.c.js.Consumer(ctx, jobs.JobsStream, jobs.ConsumerName)
	if err != nil {
		s.t.Fatal(err)
	}
	n := cons.CachedInfo().NumAckPending
	s.t.Logf("after the drain: %d messages unacknowledged", n)
	if !held {
		if n != 0 {
			s.t.Errorf("after a drain that finished every held job, %d messages are unacknowledged", n)
		}
		return
	}
	if n == 0 {
		s.t.Error("nothing was given back: SIGTERM found no job running")
		return
	}
	start, got := time.Now(), 0
	for got < n && time.Since(start) < 2500*time.Millisecond {
		batch, err := cons.Fetch(n-got, jetstream.FetchMaxWait(2500*time.Millisecond-time.Since(start)))
		if err != nil {
			s.t.Fatal(err)
		}
		for m := range batch.Messages() {
			got++
			_ = m.Nak()
		}
	}
	if got < n {
		s.t.Errorf("%d of the %d messages the worker held came back within 2.5 s; the rest waits for LA_ACK_WAIT (not given back)", got, n)
	}
}
