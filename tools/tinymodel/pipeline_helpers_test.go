package tinymodel

import (
	"context"
	"runtime"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
)

// openBundled opens the bundled model on the cpu backend as the trainer and evaluate.py
// decode it (one thread, the native grid, maxNew tokens at most), with the decoder
// weights quant ("" or "bf16": the exact path; "q8": the fast path). The native backend
// binds to one OS thread, so the goroutine stays locked to its thread until the pipeline
// is closed, when the test ends (cleanups run on the test's goroutine; the lock nests
// with the caller's own).
func openBundled(t *testing.T, maxNew int, quant string) *pipeline.Pipeline {
	t.Helper()
	runtime.LockOSThread()
	p, err := pipeline.Open(pipeline.OpenOptions{
		Settings:   engine.Settings{Backend: "cpu", Threads: 1, MaxSeqLen: 512, MaxBatch: 1, CanonGrid: "native", MaxNewTokens: maxNew, MaxNewTokensCap: maxNew, WeightsQuant: engine.WeightsQuant(quant)},
		WeightsDir: checkpointDir,
	})
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("open the bundled model (weights %q): %v", quant, err)
	}
	t.Cleanup(func() {
		p.Close()
		runtime.UnlockOSThread()
	})
	return p
}

// predict runs one image and query through p; what names the case in a failure.
func predict(t *testing.T, p *pipeline.Pipeline, image []byte, query, task, what string) (*engine.Prepared, *engine.Prediction) {
	t.Helper()
	ctx := context.Background()
	prep, err := p.Prepare(ctx, engine.Request{Image: image, Query: query, Task: engine.Task(task)})
	if err != nil {
		t.Fatalf("%s: prepare: %v", what, err)
	}
	pred, err := p.Generate(ctx, prep)
	if err != nil {
		t.Fatalf("%s: generate: %v", what, err)
	}
	return prep, pred
}
