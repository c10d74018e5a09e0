package native_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
)

// TestTTNNWorkerPipelineMatchesCPU runs whole requests (image bytes and a query in,
// prediction out) through the engine pipeline the worker builds, once with LA_ENGINE=cpu
// and once with LA_ENGINE=ttnn selecting the numpy stand-in by the backend options the
// worker passes (the pipeline adds canon_grid), and wants the same tokens, text and boxes.
func TestTTNNWorkerPipelineMatchesCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ttnnDir, err := filepath.Abs("../ttnn")
	if err != nil {
		t.Fatal(err)
	}

	open := func(backend string) *pipeline.Pipeline {
		var options map[string]string
		if backend == "ttnn" {
			options = map[string]string{"adapter": "la_ttnn_standin", "path": ttnnDir}
		}
		p, err := pipeline.Open(pipeline.OpenOptions{
			Settings:   engine.Settings{Backend: engine.BackendKind(backend), Threads: 2, MaxSeqLen: 512, MaxBatch: 1, InTokenLimit: 80, CanonGrid: "native", MaxNewTokens: 24, MaxNewTokensCap: 64},
			WeightsDir: "../../testdata/checkpoints/tiny-bf16",

			BackendOptions: options,
		})
		if err != nil {
			t.Fatalf("open %s pipeline: %v", backend, err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	cpu, ttnn := open("cpu"), open("ttnn")

	for _, c := range []struct{ image, query string }{
		{"dog.jpg", "dog"},
		{"horses.jpg", "horse</c>person"},
	} {
		t.Run(c.image, func(t *testing.T) {
			img, err := os.ReadFile(filepath.Join("../../tools/refmodel/testdata/images", c.image))
			if err != nil {
				t.Fatal(err)
			}
			run := func(p *pipeline.Pipeline) *engine.Prediction {
				prep, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: c.query})
				if err != nil {
					t.Fatal(err)
				}
				pred, err := p.Generate(context.Background(), prep)
				if err != nil {
					t.Fatal(err)
				}
				return pred
			}
			want, got := run(cpu), run(ttnn)
			if len(want.Tokens) == 0 || !slices.Equal(got.Tokens, want.Tokens) {
				t.Fatalf("tokens\nttnn %v\n cpu %v", got.Tokens, want.Tokens)
			}
			if got.RawText != want.RawText || len(got.Detections) != len(want.Detections) ||
				got.StoppedOnEOS != want.StoppedOnEOS || got.GridHW != want.GridHW {
				t.Fatalf("predictions differ:\nttnn %+v\n cpu %+v", got, want)
			}
		})
	}
}

// TestTTNNWorkerPipelineHybridMatchesCPU: hybrid requests (parallel box decoding) on the
// block-trained test model through the pipeline the worker builds, on the ttnn backend
// with the stand-in and on the CPU backend, two at a time: the same tokens, steps, text
// and boxes, in fewer steps than tokens.
func TestTTNNWorkerPipelineHybridMatchesCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ttnnDir, err := filepath.Abs("../ttnn")
	if err != nil {
		t.Fatal(err)
	}
	open := func(backend string) *pipeline.Pipeline {
		var options map[string]string
		if backend == "ttnn" {
			options = map[string]string{"adapter": "la_ttnn_standin", "path": ttnnDir}
		}
		p, err := pipeline.Open(pipeline.OpenOptions{
			Settings:   engine.Settings{Backend: engine.BackendKind(backend), Threads: 2, MaxSeqLen: 512, MaxBatch: 2, CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 48, GenerationMode: engine.GenerationHybrid},
			WeightsDir: "../../tools/refmodel/testdata/hybrid/tiny-shapes-blocks",

			BackendOptions: options,
		})
		if err != nil {
			t.Fatalf("open %s pipeline: %v", backend, err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	cpu, ttnn := open("cpu"), open("ttnn")
	var reqs []engine.Request
	for _, c := range []struct{ image, query string }{{"05.png", "triangle"}, {"11.png", "red circle</c>blue square"}} {
		img, err := os.ReadFile(filepath.Join("../../tools/tinymodel/testdata/heldout", c.image))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, engine.Request{Image: img, Query: c.query})
	}
	run := func(p *pipeline.Pipeline) []*engine.Prediction {
		var seqs []*engine.Sequence
		for _, r := range reqs {
			prep, err := p.Prepare(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			s, err := p.Start(prep)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, s)
		}
		for {
			var live []*engine.Sequence
			for _, s := range seqs {
				if !s.Done {
					live = append(live, s)
				}
			}
			if len(live) == 0 {
				break
			}
			if err := p.Step(live); err != nil {
				t.Fatal(err)
			}
		}
		var preds []*engine.Prediction
		for _, s := range seqs {
			pred, err := p.Finish(s)
			if err != nil {
				t.Fatal(err)
			}
			preds = append(preds, pred)
		}
		return preds
	}
	want, got := run(cpu), run(ttnn)
	for i := range want {
		w, g := want[i], got[i]
		if g.GenerationMode != engine.GenerationHybrid || !slices.Equal(g.Tokens, w.Tokens) || g.DecodeSteps != w.DecodeSteps ||
			g.RawText != w.RawText || len(g.Detections) != len(w.Detections) {
			t.Fatalf("request %d:\nttnn %s %d steps %v %q\n cpu %s %d steps %v %q", i, g.GenerationMode, g.DecodeSteps, g.Tokens,
				g.RawText, w.GenerationMode, w.DecodeSteps, w.Tokens, w.RawText)
		}
		if g.DecodeSteps >= len(g.Tokens)-1 {
			t.Errorf("request %d: %d steps for %d tokens", i, g.DecodeSteps, len(g.Tokens))
		}
		t.Logf("request %d: %d tokens in %d steps: %q", i, len(g.Tokens), g.DecodeSteps, g.RawText)
	}
}
