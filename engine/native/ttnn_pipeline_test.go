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
			WeightsDir: "../../testdata/checkpoints/tiny-bf16", Backend: backend, Threads: 2,
			MaxSeqLen: 512, MaxBatch: 1, InTokenLimit: 80, CanonGrid: "native", MaxNewTokens: 24, MaxNewTokensCap: 64,
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
