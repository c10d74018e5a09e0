package sim_test

import (
	"context"
	"os"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/sim"
)

// TestHybridThroughThePipeline: the real host pipeline's hybrid loop on the simulated
// chip answers a JPEG with AR mode's detections and scores in fewer device steps, which
// the meter counts as block steps.
func TestHybridThroughThePipeline(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	meter := &sim.Meter{}
	p, err := pipeline.Open(pipeline.OpenOptions{
		Settings:   engine.Settings{Backend: sim.Name, MaxSeqLen: 4096, MaxBatch: 2, CanonAspect: "1920x1080", MaxNewTokens: 256, MaxNewTokensCap: 1024},
		WeightsDir: bundledModel, ModelName: "tiny-shapes",

		Sim:      sim.Costs{Vision: 49 * time.Millisecond, Prefill: 58 * time.Millisecond, Decode: 24 * time.Millisecond, BatchAlpha: 0.05, Speed: 1000},
		SimMeter: meter,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	img, err := os.ReadFile("../../testdata/images/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	run := func(mode engine.GenerationMode) *engine.Prediction {
		ctx := context.Background()
		prep, err := p.Prepare(ctx, engine.Request{Image: img, Query: "dog</c>bicycle</c>car", GenerationMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := p.Generate(ctx, prep)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		return pred
	}
	ar := run(engine.GenerationAR)
	m0 := meter.Read()
	hy := run(engine.GenerationHybrid)
	m := meter.Read().Sub(m0)
	if hy.GenerationMode != engine.GenerationHybrid || hy.RawText != ar.RawText || !reflect.DeepEqual(hy.Detections, ar.Detections) {
		t.Fatalf("hybrid (%s) %q %+v\nAR %q %+v", hy.GenerationMode, hy.RawText, hy.Detections, ar.RawText, ar.Detections)
	}
	if hy.NumGeneratedTokens != ar.NumGeneratedTokens || hy.DecodeSteps*2 > ar.DecodeSteps || !hy.StoppedOnEOS {
		t.Errorf("hybrid: %d tokens in %d steps (EOS %v); AR: %d in %d", hy.NumGeneratedTokens, hy.DecodeSteps, hy.StoppedOnEOS,
			ar.NumGeneratedTokens, ar.DecodeSteps)
	}
	if m.BlockSteps != int64(hy.DecodeSteps) || m.Steps != m.BlockSteps || m.Sequences != 1 {
		t.Errorf("meter %+v for %d hybrid steps", m, hy.DecodeSteps)
	}
	t.Logf("%d tokens: AR %d steps, hybrid %d steps (%d rows)", ar.NumGeneratedTokens, ar.DecodeSteps, hy.DecodeSteps, m.StepRows)
}
