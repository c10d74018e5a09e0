package jobs

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs/natsembed"
)

// The delay between a transient failure and the next delivery is the Runner's retry delay
// (RetryDelay, doubling, capped), whatever the consumer's BackOff: JetStream measures a
// NakWithDelay from "ack wait ago" but compares against the BackOff step of the delivery,
// so a plain NakWithDelay(d) would come back after d + BackOff[n-1] - AckWait.
func TestRetryDelayIsTheRunnersWhateverTheBackOff(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 2 * time.Second,
		BackOff: []time.Duration{2 * time.Second, 5 * time.Second}, MaxDeliver: 4})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	var mu sync.Mutex
	var calls []time.Time
	eng := enginetest.New()
	eng.Err = errors.New("device busy") // transient: retried
	eng.OnCall = func(method, query string) {
		if method == "Generate" {
			mu.Lock()
			calls = append(calls, time.Now())
			mu.Unlock()
		}
	}
	cfg := e.runnerConfig("w1")
	cfg.RetryDelay, cfg.RetryDelayMax = 300*time.Millisecond, 1200*time.Millisecond
	startRunner(t, e.topo, e.store, eng, cfg)

	e.publishJob(t, Job{ID: "flaky", Image: img, Query: "busy"})
	testwait.Until(t, 60*time.Second, "four deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) >= 4
	})
	mu.Lock()
	defer mu.Unlock()
	for i, want := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond} {
		got := calls[i+1].Sub(calls[i])
		// The job's own work (fetch, state) and the pull add a little; the server's timer
		// is exact to a few milliseconds.
		if got < want-50*time.Millisecond || got > want+700*time.Millisecond {
			t.Errorf("delivery %d came %s after delivery %d; want the retry delay %s", i+2, got.Round(time.Millisecond), i+1, want)
		}
	}
}

// A job given back at shutdown runs on the next worker at once, even when the server
// restarts in between, as the embedded one does with the worker: the give-back must reach
// the server's store, not only its in-memory redelivery queue, before the connection closes.
func TestGivenBackJobRunsPromptlyAfterAServerRestart(t *testing.T) {
	addr, dir := freeport.MustAddr(t), t.TempDir()
	ns := startNATSAt(t, addr, dir)
	// Long enough that only the give-back can bring the job back within the test.
	cfg := TopologyConfig{AckWait: time.Minute, BackOff: []time.Duration{time.Minute}, MaxDeliver: 5}
	e := newTestEnvOn(t, ns.ClientURL(), cfg)
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, _ := heldEngine(1) // never released: the grace period cuts the job off
	rc := e.runnerConfig("A")
	rc.Grace = time.Millisecond
	a := startRunner(t, e.topo, e.store, eng, rc)
	e.publishJob(t, Job{ID: "given-back", Image: img, Query: "block"})
	<-started

	// SIGTERM on a single-machine worker: the Runner gives the job back, then the worker
	// closes its connection and the embedded server.
	a.stop(t)
	e.js.Conn().Close()
	ns.Shutdown()
	stopped := time.Now()

	ns = startNATSAt(t, addr, dir)
	_, topo := connectTopologyURL(t, ns.ClientURL(), cfg)
	startRunner(t, topo, e.store, enginetest.New(), e.runnerConfig("B"))
	var res Result
	testwait.Until(t, 20*time.Second, "the given-back job to run on B", func() bool {
		r, err := e.store.Get(t.Context(), ResultURL(defaultOutput, "given-back"), 0)
		if err != nil {
			return false
		}
		return json.Unmarshal(r, &res) == nil
	})
	if res.Status != StatusSucceeded || res.Worker != "B" || res.Attempt != 2 {
		t.Errorf("status %s worker %s attempt %d; want succeeded by B on attempt 2", res.Status, res.Worker, res.Attempt)
	}
	t.Logf("given back and run again %s after the server stopped", time.Since(stopped).Round(time.Millisecond))
}

// startNATSAt runs an embedded server on addr with its store in dir until the test ends;
// a test restarts it by calling Shutdown and startNATSAt again with the same two.
func startNATSAt(t *testing.T, addr, dir string) *natsembed.Server {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatalf("start embedded NATS on %s: %v", addr, err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func TestNakDelayCorrectsForTheBackOffStep(t *testing.T) {
	cc := jetstream.ConsumerConfig{AckWait: time.Minute, BackOff: []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute}}
	for _, c := range []struct {
		cc         jetstream.ConsumerConfig
		n          int
		want, send time.Duration
	}{
		{cc, 1, 5 * time.Second, 5 * time.Second},                                     // BackOff[0] = AckWait: nothing to correct
		{cc, 2, 10 * time.Second, -50 * time.Second},                                  // BackOff[1] is a minute longer
		{cc, 3, 20 * time.Second, -220 * time.Second},                                 // BackOff[2], four minutes longer
		{cc, 9, 5 * time.Minute, time.Minute},                                         // past the last step: the last
		{cc, 0, 0, 0},                                                                 // no metadata: as the first delivery
		{jetstream.ConsumerConfig{AckWait: time.Minute}, 4, time.Second, time.Second}, // no BackOff: the ack wait
	} {
		if got := nakDelay(c.cc, c.n, c.want); got != c.send {
			t.Errorf("back-off %v, delivery %d, want %s: sent %s, want %s", c.cc.BackOff, c.n, c.want, got, c.send)
		}
	}
}

// JetStream gives a message on its n-th delivery BackOff[n-1] without a heartbeat before it
// redelivers it, so the heartbeat must beat the shortest step, not only the first.
func TestHeartbeatKeepsALaterDeliveryUnderAShorterBackOffStep(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 9 * time.Second,
		BackOff: []time.Duration{9 * time.Second, 2 * time.Second}, MaxDeliver: 4})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	engA, started, _ := heldEngine(1) // never released: delivery 1 is given back at shutdown
	rc := e.runnerConfig("A")
	rc.Grace = time.Millisecond
	a := startRunner(t, e.topo, e.store, engA, rc)
	e.publishJob(t, Job{ID: "slow-second", Image: img, Query: "block"})
	<-started
	a.stop(t)

	engB := enginetest.New()
	engB.Delay = 4 * time.Second // twice the second delivery's back-off step
	startRunner(t, e.topo, e.store, engB, e.runnerConfig("B"))
	res := e.publishedResult(t, DefaultBatch, "slow-second")
	if res.Status != StatusSucceeded || res.Attempt != 2 {
		t.Errorf("status %s attempt %d; want succeeded on delivery 2", res.Status, res.Attempt)
	}
	if n := engB.Calls("block"); n != 1 {
		t.Errorf("delivery 2 ran %d times on B; want once (kept alive by its heartbeat)", n)
	}
}
