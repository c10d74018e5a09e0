package jobs

import (
	"cmp"
	"os"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
)

// blocksOptions is the C engine on the block-trained test model (it writes a box per block
// step; the bundled model answers blocks with noise), two sequences a step.
func blocksOptions() pipeline.OpenOptions {
	return pipeline.OpenOptions{
		WeightsDir: "../tools/refmodel/testdata/hybrid/tiny-shapes-blocks", Backend: "cpu", Threads: 1,
		MaxSeqLen: 512, MaxBatch: 2, CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 48,
	}
}

// TestJobGenerationModeThroughTheRunner: a job's generation_mode reaches the engine and its
// result: a hybrid job answers what the engine answers in hybrid mode, in fewer decode steps
// than tokens; a job that names no mode, or ar, is decoded one token per step. Each result
// says its mode and steps (in what is published and what is stored, both valid against the
// result schema), and the decode-step series count them by mode.
func TestJobGenerationModeThroughTheRunner(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img, err := os.ReadFile("../tools/tinymodel/testdata/heldout/05.png")
	if err != nil {
		t.Fatal(err)
	}
	image := e.putImage(t, "scene.png", img)

	want := map[engine.GenerationMode]*engine.Prediction{}
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p, err := pipeline.Open(blocksOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for _, mode := range engine.GenerationModes {
			prep, err := p.Prepare(t.Context(), engine.Request{Image: img, Query: "triangle", GenerationMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if want[mode], err = p.Generate(t.Context(), prep); err != nil {
				t.Fatal(err)
			}
		}
	}()

	cfg := e.runnerConfig("w1")
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	startRunnerWith(t, e.topo, e.store, func() (engine.Engine, error) { return pipeline.Open(blocksOptions()) }, cfg)
	jobModes := map[string]engine.GenerationMode{"hybrid": engine.GenerationHybrid, "ar": engine.GenerationAR, "default": ""}
	for id, mode := range jobModes {
		e.publishJob(t, Job{ID: id, Image: image, Query: "triangle", GenerationMode: mode})
	}
	for id, mode := range jobModes {
		decoded := cmp.Or(mode, engine.GenerationAR) // LA_GENERATION_MODE's default
		w := want[decoded]
		for where, res := range map[string]Result{
			"published": e.publishedResult(t, DefaultBatch, id),
			"stored":    e.storedResult(t, defaultOutput, id),
		} {
			if res.Status != StatusSucceeded {
				t.Fatalf("%s %s: %s %+v", where, id, res.Status, res.Error)
			}
			if res.GenerationMode != decoded || res.DecodeMode != w.DecodeMode || res.RawText != w.RawText ||
				res.DecodeSteps != w.DecodeSteps || res.NumGeneratedTokens != w.NumGeneratedTokens {
				t.Errorf("%s %s: %s %s %q in %d steps (%d tokens); the engine's %s answer: %s %q in %d steps (%d tokens)",
					where, id, res.GenerationMode, res.DecodeMode, res.RawText, res.DecodeSteps, res.NumGeneratedTokens,
					decoded, w.DecodeMode, w.RawText, w.DecodeSteps, w.NumGeneratedTokens)
			}
		}
	}
	hy, ar := want[engine.GenerationHybrid], want[engine.GenerationAR]
	if hy.DecodeMode != "hybrid_greedy" || hy.DecodeSteps < 1 || hy.DecodeSteps >= hy.NumGeneratedTokens-1 {
		t.Errorf("the engine's hybrid answer: %s in %d steps for %d tokens; want hybrid_greedy in fewer steps than AR would take",
			hy.DecodeMode, hy.DecodeSteps, hy.NumGeneratedTokens)
	}
	if ar.DecodeSteps != ar.NumGeneratedTokens-1 {
		t.Errorf("the engine's AR answer: %d steps for %d tokens, want one per token after the first", ar.DecodeSteps, ar.NumGeneratedTokens)
	}

	for _, c := range []struct {
		mode       engine.GenerationMode
		jobs       uint64
		steps, tps float64
	}{
		{engine.GenerationHybrid, 1, float64(hy.DecodeSteps), float64(hy.NumGeneratedTokens) / float64(hy.DecodeSteps)},
		{engine.GenerationAR, 2, 2 * float64(ar.DecodeSteps), 2 * float64(ar.NumGeneratedTokens) / float64(ar.DecodeSteps)},
	} {
		for name, h := range map[string]*prometheus.HistogramVec{"la_job_decode_steps": cfg.Metrics.DecodeSteps, "la_job_tokens_per_step": cfg.Metrics.TokensPerStep} {
			var m dto.Metric
			if err := h.WithLabelValues(string(c.mode)).(prometheus.Histogram).Write(&m); err != nil {
				t.Fatal(err)
			}
			sum := c.steps
			if name == "la_job_tokens_per_step" {
				sum = c.tps
			}
			if got := m.GetHistogram(); got.GetSampleCount() != c.jobs || !near(got.GetSampleSum(), sum) {
				t.Errorf("%s{generation_mode=%s}: %d jobs summing to %v, want %d summing to %v",
					name, c.mode, got.GetSampleCount(), got.GetSampleSum(), c.jobs, sum)
			}
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
