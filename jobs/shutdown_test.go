package jobs

import (
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
)

func TestShutdownFinishesHeldJobsAndStopsPulling(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, release := heldEngine(4)
	cfg := e.runnerConfig("w1")
	cfg.Prefetch = 2
	r := startRunner(t, e.topo, e.store, eng, cfg)

	e.publishJob(t, Job{ID: "in-flight", Image: img, Query: "block"})
	<-started
	e.publishJob(t, Job{ID: "prefetched", Image: img, Query: "prefetched"})
	testwait.Until(t, 30*time.Second, "the second job to be held", func() bool {
		info, err := e.topo.Consumer.Info(t.Context())
		return err == nil && info.NumAckPending == 2
	})

	r.cancel() // SIGTERM
	e.publishJob(t, Job{ID: "after-stop", Image: img, Query: "after-stop"})
	select {
	case err := <-r.done:
		t.Fatalf("Run returned (%v) while a job was still running", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-r.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.done <- nil // for the cleanup's stop

	for _, id := range []string{"in-flight", "prefetched"} {
		if res := e.publishedResult(t, DefaultBatch, id); res.Status != StatusSucceeded {
			t.Errorf("%s: status %s error %+v; want it finished during the drain", id, res.Status, res.Error)
		}
	}
	info, err := e.topo.Consumer.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 1 {
		t.Errorf("after the drain: %d unacked, %d pending; want 0 and 1 (the job published after the stop)", info.NumAckPending, info.NumPending)
	}
	if eng.Calls("after-stop") != 0 {
		t.Error("a job was pulled after the stop")
	}
}

func TestShutdownGivesBackWhatCannotFinish(t *testing.T) {
	// A long AckWait: the job can only come back this soon through the nak.
	e := newTestEnv(t, TopologyConfig{AckWait: 5 * time.Minute, MaxDeliver: 5})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, _ := heldEngine(1) // never released: the grace period cuts the job off
	cfg := e.runnerConfig("A")
	cfg.Grace = 200 * time.Millisecond
	a := startRunner(t, e.topo, e.store, eng, cfg)

	e.publishJob(t, Job{ID: "too-long", Image: img, Query: "block"})
	<-started
	a.stop(t) // returns once the grace period cut the job off
	st, _, err := e.topo.State.Get(t.Context(), "too-long")
	if err != nil || st.Status != StatusRunning {
		t.Errorf("state after the cut-off: %+v (%v); want running, not terminal", st, err)
	}

	engB := enginetest.New() // no gate: B runs the job straight through
	startRunner(t, e.topo, e.store, engB, e.runnerConfig("B"))
	res := e.publishedResult(t, DefaultBatch, "too-long")
	if res.Status != StatusSucceeded || res.Worker != "B" || res.Attempt != 2 {
		t.Errorf("status %s worker %s attempt %d; want succeeded by B on attempt 2", res.Status, res.Worker, res.Attempt)
	}
}
