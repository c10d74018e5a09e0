package jobs

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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
		Settings:   engine.Settings{Backend: "cpu", Threads: 1, MaxSeqLen: 512, MaxBatch: 2, CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 48},
		WeightsDir: "../tools/refmodel/testdata/hybrid/tiny-shapes-blocks",
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

// withoutBlocks copies the block-trained test model into a directory of the test's with
// text_config.block_size left out of config.json: a checkpoint that cannot decode in
// hybrid mode (its AR answers are unchanged).
func withoutBlocks(t *testing.T) string {
	t.Helper()
	src := blocksOptions().WeightsDir
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "config.json" {
			var cfg map[string]any
			if err := json.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			text, _ := cfg["text_config"].(map[string]any)
			if _, ok := text["block_size"]; !ok {
				t.Fatalf("%s/config.json has no text_config.block_size to leave out", src)
			}
			delete(text, "block_size")
			if data, err = json.Marshal(cfg); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHybridJobOnAModelWithoutBlocksFails: a hybrid job on a checkpoint that cannot decode
// in blocks fails for good with bad_generation_mode and a dead-letter record saying why,
// on its first delivery; an AR job on the same worker still succeeds.
func TestHybridJobOnAModelWithoutBlocksFails(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img, err := os.ReadFile("../tools/tinymodel/testdata/heldout/05.png")
	if err != nil {
		t.Fatal(err)
	}
	image := e.putImage(t, "scene.png", img)
	opts := blocksOptions()
	opts.WeightsDir = withoutBlocks(t)
	startRunnerWith(t, e.topo, e.store, func() (engine.Engine, error) { return pipeline.Open(opts) }, e.runnerConfig("w1"))
	e.publishJob(t, Job{ID: "hy", Image: image, Query: "triangle", GenerationMode: engine.GenerationHybrid})
	e.publishJob(t, Job{ID: "ar", Image: image, Query: "triangle"})

	res := e.publishedResult(t, DefaultBatch, "hy")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != engine.CodeBadGeneration || res.Attempt != 1 ||
		!strings.Contains(res.Error.Message, "block_size") {
		t.Errorf("hybrid job on a model without blocks: %s %+v after %d deliveries; want failed with %s naming block_size, at once",
			res.Status, res.Error, res.Attempt, engine.CodeBadGeneration)
	}
	if rec := e.dlqRecord(t, "hy"); rec == nil || rec.Code != engine.CodeBadGeneration {
		t.Errorf("DLQ record %+v, want one with %s", rec, engine.CodeBadGeneration)
	}
	if res := e.publishedResult(t, DefaultBatch, "ar"); res.Status != StatusSucceeded || res.GenerationMode != engine.GenerationAR {
		t.Errorf("AR job on the same worker: %s %s %+v", res.Status, res.GenerationMode, res.Error)
	}
}
