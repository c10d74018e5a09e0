package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode/golden"
)

// blockScenes prepares the first n of the goldens' scenes on p, the i-th in modes[i%len(modes)].
func blockScenes(t *testing.T, p *Pipeline, f *golden.File, n int, modes ...engine.GenerationMode) []*engine.Prepared {
	t.Helper()
	preps := make([]*engine.Prepared, n)
	for i := range preps {
		run := &f.Runs[i]
		img, err := os.ReadFile(filepath.Join("../..", run.Image))
		if err != nil {
			t.Fatal(err)
		}
		preps[i], err = p.Prepare(context.Background(), engine.Request{Image: img, Query: run.Query, Task: engine.Task(run.Task),
			MaxNewTokens: run.MaxNew, GenerationMode: modes[i%len(modes)]})
		if err != nil {
			t.Fatal(err)
		}
	}
	return preps
}

// Hybrid sequences batched together, and beside AR ones, through the Batcher methods with
// continuous batching: every answer is the one the request gets alone (tokens,
// probabilities, boxes and scores), so AR sequences are untouched by hybrid ones in the
// same step and hybrid ones by each other.
func TestHybridBatchedEqualsAlone(t *testing.T) {
	f := loadGolden(t, "tiny-shapes-blocks.json")
	o := OpenOptions{Settings: engine.Settings{InTokenLimit: 64, MaxNewTokens: 48, MaxNewTokensCap: 64}, WeightsDir: blocksDir}
	for _, c := range []struct {
		name  string
		modes []engine.GenerationMode
	}{
		{"hybrid", []engine.GenerationMode{engine.GenerationHybrid}},
		{"mixed", []engine.GenerationMode{engine.GenerationHybrid, engine.GenerationAR, engine.GenerationHybrid}},
	} {
		t.Run(c.name, func(t *testing.T) {
			alone := openPipeline(t, o)
			preps := blockScenes(t, alone, f, 14, c.modes...)
			want := make([]seqAnswer, len(preps))
			for i, prep := range preps {
				pred, err := alone.Generate(context.Background(), prep)
				if err != nil {
					t.Fatal(err)
				}
				want[i] = answerOf(pred)
			}

			o := o
			o.MaxBatch = 4
			p := openPipeline(t, o)
			got := make([]seqAnswer, len(preps))
			running := map[*engine.Sequence]int{}
			var seqs []*engine.Sequence
			next, hybridTogether, mixed := 0, 0, false
			for next < len(preps) || len(seqs) > 0 {
				for len(seqs) < p.MaxBatch() && next < len(preps) {
					s, err := p.Start(preps[next])
					if err != nil {
						t.Fatal(err)
					}
					running[s] = next
					next++
					if s.Done { // AR: EOS first
						pred, err := p.Finish(s)
						if err != nil {
							t.Fatal(err)
						}
						got[running[s]] = answerOf(pred)
						continue
					}
					seqs = append(seqs, s)
				}
				nh := 0
				for _, s := range seqs {
					if s.Mode == engine.GenerationHybrid {
						nh++
					}
				}
				hybridTogether = max(hybridTogether, nh)
				mixed = mixed || (nh > 0 && nh < len(seqs))
				if err := p.Step(seqs); err != nil {
					t.Fatal(err)
				}
				live := seqs[:0]
				for _, s := range seqs {
					if !s.Done {
						live = append(live, s)
						continue
					}
					pred, err := p.Finish(s)
					if err != nil {
						t.Fatal(err)
					}
					if pred.GenerationMode != s.Mode || pred.DecodeSteps != s.DecodeSteps {
						t.Fatalf("prediction says %s in %d steps, the sequence %s in %d", pred.GenerationMode, pred.DecodeSteps, s.Mode, s.DecodeSteps)
					}
					got[running[s]] = answerOf(pred)
				}
				seqs = live
			}
			for i := range preps {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("scene %s (%s) batched:\n%+v\nalone:\n%+v", f.Runs[i].Case, preps[i].GenerationMode, got[i], want[i])
				}
			}
			if hybridTogether < 2 || (len(c.modes) > 1 && !mixed) {
				t.Errorf("at most %d hybrid sequences stepped together; AR beside hybrid: %v", hybridTogether, mixed)
			}
		})
	}
}

// seqAnswer is what batching must not change.
type seqAnswer struct {
	Tokens     []int32
	Probs      []float32
	Detections []engine.Detection
	Points     []engine.Point
	Steps      int
}

func answerOf(p *engine.Prediction) seqAnswer {
	return seqAnswer{p.Tokens, p.Probs, p.Detections, p.Points, p.DecodeSteps}
}
