package jobs

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/internal/testwait"
)

// simOptions is the simulated chip on the bundled model, ten times faster than a p150a, so
// a job's decode takes long enough (tens of steps of ~2 ms) to cancel it halfway.
func simOptions(maxBatch int) pipeline.OpenOptions {
	return pipeline.OpenOptions{
		Settings:   engine.Settings{Backend: sim.Name, MaxSeqLen: 4096, MaxBatch: maxBatch, MaxNewTokens: 128, MaxNewTokensCap: 1024},
		WeightsDir: "../models/tiny-shapes",
		MaxPixels:  40_000_000,
		Sim: sim.Costs{Vision: 49 * time.Millisecond, Prefill: 58 * time.Millisecond,
			Decode: 23 * time.Millisecond, BatchAlpha: 0.1, Speed: 10},
	}
}

// TestBatchedJobsAnswerAsAloneWithCancelAndDrain runs jobs through a runner whose chip
// decodes four at a time: every answer equals the same request answered alone, a job
// cancelled while it decodes among others ends canceled without touching them, and a
// shutdown in the middle of a full batch finishes every job it holds.
func TestBatchedJobsAnswerAsAloneWithCancelAndDrain(t *testing.T) {
	e := newTestEnv(t, testTopology())
	images := map[string]string{}
	for _, name := range []string{"dog.jpg", "kite.jpg", "person.jpg"} {
		images[name] = e.putImage(t, name, photo(t, name))
	}
	type job struct{ id, image, query string }
	var all []job
	queries := []string{"dog", "person</c>kite", "red circle", "kite</c>dog</c>person"}
	for i := range 12 {
		name := []string{"dog.jpg", "kite.jpg", "person.jpg"}[i%3]
		all = append(all, job{fmt.Sprint("b", i), name, queries[i%len(queries)]})
	}

	// The reference: each request alone on a batch-1 simulated chip.
	want := map[string]string{}
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p, err := pipeline.Open(simOptions(1))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for _, j := range all {
			prep, err := p.Prepare(t.Context(), engine.Request{Image: photo(t, j.image), Query: j.query})
			if err != nil {
				t.Fatal(err)
			}
			pred, err := p.Generate(t.Context(), prep)
			if err != nil {
				t.Fatal(err)
			}
			want[j.id] = pred.RawText
		}
	}()

	cfg := e.runnerConfig("w1")
	cfg.Prefetch = 6
	r := startRunnerWith(t, e.topo, e.store, openSim(4), cfg)

	// A long job to cancel while it decodes among the others: the simulated model answers
	// every category with a label and boxes, so forty categories take hundreds of steps
	// (a one-category answer could end before the cancel lands on a loaded machine).
	cats := make([]string, 40)
	for i := range cats {
		cats[i] = fmt.Sprint("thing", i)
	}
	e.publishJob(t, Job{ID: "victim", Image: images["dog.jpg"], Query: strings.Join(cats, "</c>"), MaxNewTokens: 1000})
	for _, j := range all[:6] {
		e.publishJob(t, Job{ID: j.id, Image: images[j.image], Query: j.query})
	}
	testwait.Until(t, time.Minute, "a full batch", func() bool { return r.chip.Running() >= 4 })
	if err := e.topo.State.RequestCancel(t.Context(), "victim", "test"); err != nil {
		t.Fatal(err)
	}
	if res := e.publishedResult(t, DefaultBatch, "victim"); res.Status != StatusCanceled {
		t.Fatalf("victim: %s %+v, want canceled", res.Status, res.Error)
	}
	for _, j := range all[6:] {
		e.publishJob(t, Job{ID: j.id, Image: images[j.image], Query: j.query})
	}
	// Shut down while a batch runs: what the runner holds must finish within the grace.
	testwait.Until(t, time.Minute, "a batch to run", func() bool { return r.chip.Running() >= 2 })
	r.stop(t)

	// Whatever the shutdown left in the queue runs on a second worker.
	startRunnerWith(t, e.topo, e.store, openSim(4), e.runnerConfig("w2"))
	for _, j := range all {
		res := e.publishedResult(t, DefaultBatch, j.id)
		if res.Status != StatusSucceeded {
			t.Errorf("%s: %s %+v", j.id, res.Status, res.Error)
			continue
		}
		if res.RawText != want[j.id] {
			t.Errorf("%s (%q on %s) batched:\n%s\nalone:\n%s", j.id, j.query, j.image, res.RawText, want[j.id])
		}
		if !res.Simulated { // and the schema accepts the mark (publishedResult checks it)
			t.Errorf("%s: an answer of the simulated chip is not marked simulated", j.id)
		}
	}
}

// openSim opens the simulated chip batching maxBatch sequences.
func openSim(maxBatch int) func() (engine.Engine, error) {
	return func() (engine.Engine, error) { return pipeline.Open(simOptions(maxBatch)) }
}

// photo reads one of the repository's photographs.
func photo(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/images/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
