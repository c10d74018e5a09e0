package pipeline_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/sim"
)

// openSim opens the simulated chip on the bundled model, which lends it its configuration
// and tokenizer, at a speed that keeps the test quick.
func openSim(t *testing.T, maxBatch int, meter *sim.Meter) *pipeline.Pipeline {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	p, err := pipeline.Open(pipeline.OpenOptions{
		Settings:   engine.Settings{Backend: "sim", MaxSeqLen: 4096, MaxBatch: maxBatch, CanonAspect: "1920x1080", MaxNewTokens: 128, MaxNewTokensCap: 1024},
		WeightsDir: "../../models/tiny-shapes", ModelName: "tiny-shapes",

		Sim:      sim.Costs{Vision: 49 * time.Millisecond, Prefill: 58 * time.Millisecond, Decode: 24 * time.Millisecond, BatchAlpha: 0.05, Speed: 100},
		SimMeter: meter,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// TestSimRunsTheRealHostPipeline: with Backend "sim" a JPEG goes through the real decode,
// resize to the served canonical grid, prompt and answer parsing, and comes back with one
// label per category, as a chip-backed pipeline describes itself.
func TestSimRunsTheRealHostPipeline(t *testing.T) {
	meter := &sim.Meter{}
	p := openSim(t, 1, meter)
	info := p.Info()
	if info.Backend != "sim" || info.Device != "simulated Blackhole p150a" || info.CanonicalGrid != [2]int{24, 44} || info.InTokenLimit != 1024 {
		t.Fatalf("info %+v: want backend sim on a simulated p150a, the 24x44 grid of 1920x1080 at 1024 tokens", info)
	}
	img, err := os.ReadFile("../../testdata/images/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prep, err := p.Prepare(ctx, engine.Request{Image: img, Query: "dog</c>bicycle</c>car"})
	if err != nil {
		t.Fatal(err)
	}
	pred, err := p.Generate(ctx, prep)
	if err != nil {
		t.Fatal(err)
	}
	if pred.GridHW != [2]int{24, 44} || pred.PrefillTokens != 512 || !pred.StoppedOnEOS || pred.Width != 768 {
		t.Errorf("prediction: grid %v, prefill %d tokens, stopped on EOS %v, width %d; want 24x44, 512, true, 768",
			pred.GridHW, pred.PrefillTokens, pred.StoppedOnEOS, pred.Width)
	}
	var labels []string
	for _, d := range pred.Detections {
		if !slices.Contains(labels, d.Label) {
			labels = append(labels, d.Label)
		}
		if d.Box[2] > 768 || d.Box[3] > 576 || d.Box[0] >= d.Box[2] || d.Box[1] >= d.Box[3] {
			t.Errorf("box %v is not inside the 768x576 image", d.Box)
		}
	}
	if !slices.Equal(labels, []string{"dog", "bicycle", "car"}) {
		t.Errorf("labels %v in %q, want one per category in order", labels, pred.RawText)
	}
	// The device time is the cost model's for the served shapes: vision on 24x44, prefill
	// at 512, one step per token after the first.
	costs := sim.Costs{Vision: 49 * time.Millisecond, Prefill: 58 * time.Millisecond, Decode: 24 * time.Millisecond, BatchAlpha: 0.05, Speed: 100}
	want := costs.VisionCost(24, 44) + costs.PrefillCost(512) + time.Duration(pred.NumGeneratedTokens-1)*costs.StepCost(1)
	if m := meter.Read(); m.Sequences != 1 || int(m.Steps) != pred.NumGeneratedTokens-1 || m.Busy != want {
		t.Errorf("meter %+v after one request of %d tokens, want busy %s", m, pred.NumGeneratedTokens, want)
	}
}

// TestSimBatchedAnswersMatchGenerate: requests run through the Batcher API together give
// exactly the predictions Generate gives each alone.
func TestSimBatchedAnswersMatchGenerate(t *testing.T) {
	p := openSim(t, 4, nil)
	ctx := context.Background()
	var preps []*engine.Prepared
	for _, c := range []struct{ image, query string }{
		{"dog.jpg", "dog</c>bicycle"}, {"kite.jpg", "kite"}, {"person.jpg", "person</c>tie</c>car"},
		{"dog.jpg", "truck"}, {"kite.jpg", "person</c>kite</c>tree"},
	} {
		img, err := os.ReadFile("../../testdata/images/" + c.image)
		if err != nil {
			t.Fatal(err)
		}
		prep, err := p.Prepare(ctx, engine.Request{Image: img, Query: c.query})
		if err != nil {
			t.Fatal(err)
		}
		preps = append(preps, prep)
	}
	var alone []*engine.Prediction
	for _, prep := range preps {
		pred, err := p.Generate(ctx, prep)
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, pred)
	}

	batched := make([]*engine.Prediction, len(preps))
	index := map[*engine.Sequence]int{}
	var running []*engine.Sequence
	next, maxRunning := 0, 0
	for next < len(preps) || len(running) > 0 {
		for next < len(preps) && len(running) < p.MaxBatch() {
			s, err := p.Start(preps[next])
			if err != nil {
				t.Fatal(err)
			}
			index[s] = next
			running = append(running, s)
			next++
		}
		maxRunning = max(maxRunning, len(running))
		if err := p.Step(running); err != nil {
			t.Fatal(err)
		}
		kept := running[:0]
		for _, s := range running {
			if !s.Done {
				kept = append(kept, s)
				continue
			}
			pred, err := p.Finish(s)
			if err != nil {
				t.Fatal(err)
			}
			batched[index[s]] = pred
		}
		running = kept
	}
	if maxRunning < 4 {
		t.Fatalf("at most %d sequences ran together", maxRunning)
	}
	for i := range preps {
		a, b := alone[i], batched[i]
		if a.RawText != b.RawText || !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.Detections, b.Detections) {
			t.Errorf("request %d: alone %q, batched %q", i, a.RawText, b.RawText)
		}
	}
}
