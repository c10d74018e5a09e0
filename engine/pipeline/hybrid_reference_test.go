package pipeline

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/blockdecode/golden"
)

// prepareRun prepares a golden run's request (its image, task and query) on p, hybrid,
// and checks the prompt is the reference's.
func prepareRun(t *testing.T, p *Pipeline, run *golden.Run) *engine.Prepared {
	t.Helper()
	img, err := os.ReadFile(filepath.Join("../..", run.Image))
	if err != nil {
		t.Fatal(err)
	}
	task, query := engine.Task(run.Task), run.Query
	if task == "" { // the random checkpoints' runs carry the whole instruction
		task, query = taskOf(t, run.Query)
	}
	prep, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: query, Task: task,
		MaxNewTokens: run.MaxNew, GenerationMode: engine.GenerationHybrid})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prep.PromptIDs, run.PromptIDs) {
		t.Fatalf("%s: prompt ids differ from the reference's", run.Case)
	}
	return prep
}

// The random test checkpoints on the photographs, in hybrid and fast mode, at budgets 20
// and 5: the CPU backend's block step and the loop give the reference's tokens, token
// for token, in the reference's number of steps.
func TestHybridMatchesReferenceOnTheRandomCheckpoints(t *testing.T) {
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		t.Run(ckpt, func(t *testing.T) {
			f := loadGolden(t, ckpt+".json")
			for i := range f.Runs {
				run := &f.Runs[i]
				t.Run(fmt.Sprintf("%s/%s/%d", run.Case, run.Mode, run.MaxNew), func(t *testing.T) {
					p := openPipeline(t, OpenOptions{Settings: engine.Settings{InTokenLimit: run.InTokenLimit}, WeightsDir: filepath.Join(filepath.Dir(checkpointDir), ckpt)})
					p.st.mode = run.Mode
					pred, err := p.Generate(context.Background(), prepareRun(t, p, run))
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(pred.Tokens, run.Tokens) || pred.DecodeSteps != len(run.Steps) {
						t.Fatalf("%v in %d steps, reference %v in %d", pred.Tokens, pred.DecodeSteps, run.Tokens, len(run.Steps))
					}
				})
			}
		})
	}
}

// Agreement tolerances (docs/hybrid-decoding.md, "Agreement"): the reference computes in
// float32 from the weights; the engine's sums run in another order, so a decision closer
// than this may go either way.
const (
	marginTol = 5e-3 // logits: a row's top1 - top2
	probTol   = 1e-3 // probabilities: against a threshold, or between neighbours in a ranking
)

// closeCall says what made a reference step's decision too close to call, or "".
func closeCall(s *golden.Step) string {
	if s.Kind == "ar" {
		if s.Margin < marginTol {
			return fmt.Sprintf("one-token margin %.4g", s.Margin)
		}
		return ""
	}
	for r, m := range s.Margins {
		if m < marginTol {
			return fmt.Sprintf("row %d margin %.4g", r, m)
		}
	}
	near := func(p, thr float32) bool { return math.Abs(float64(p-thr)) < probTol }
	ranking := func(rows []golden.Ranked) string {
		for r, row := range rows {
			ps := append(slices.Clone(row.TopP), row.NextP)
			for j := 1; j < len(ps); j++ {
				if ps[j-1]-ps[j] < probTol {
					return fmt.Sprintf("row %d ranks %d and %d within %.4g", r+1, j-1, j, ps[j-1]-ps[j])
				}
			}
		}
		return ""
	}
	if b := s.Box; b != nil {
		if near(b.PBoxStart, 0.7) || near(b.PNone1, 0.2) || near(b.PBoxEnd2, 0.2) || near(b.PNull3, 0.1) ||
			near(b.PNull4, 0.1) || near(b.EndScore, 0.2) {
			return "a box frame probability at its threshold"
		}
		if why := ranking(b.Rows); why != "" {
			return "box " + why
		}
		for r, row := range b.Rows {
			if len(row.TopP) > 0 && near(row.TopP[0], 0.9) {
				return fmt.Sprintf("box row %d best probability at 0.9", r+1)
			}
		}
	}
	if ref := s.Ref; ref != nil {
		if near(ref.PRefStart, 0.6) {
			return "<ref> probability at 0.6"
		}
		if why := ranking(ref.Rows); why != "" {
			return "label " + why
		}
	}
	return ""
}

// firstDifference is the reference step that committed the first token where got and the
// reference differ, or -1 when they agree.
func firstDifference(run *golden.Run, got []int32) int {
	n := 0
	for i, s := range run.Steps {
		for _, tok := range s.Committed {
			if n >= len(got) || got[n] != tok {
				return i
			}
			n++
		}
	}
	if len(got) != n {
		return len(run.Steps) - 1
	}
	return -1
}

// The block-trained test model on the 96 held-out scenes (every path: labels, whole
// boxes, negatives, points, abnormal coordinates finished one token at a time, the end,
// and end blocks read as boxes): every scene's tokens are the reference's, except where
// the reference's own decision was within the agreement tolerance; those are counted. In
// AR mode every scene's tokens are the reference's slow mode's.
func TestHybridMatchesReferenceOnTheBlockModel(t *testing.T) {
	checkHybridScenes(t, "tiny-shapes-blocks.json", blocksDir)
}

// The bundled model (fine-tuned for blocks with a coordinate margin) on the same 96
// scenes, against its own goldens: what `LA_GENERATION_MODE=hybrid` runs out of the box.
func TestHybridMatchesReferenceOnTheBundledModel(t *testing.T) {
	checkHybridScenes(t, "tiny-shapes.json", "../../models/tiny-shapes")
}

// checkHybridScenes runs a golden file's held-out scenes on the checkpoint in dir, in
// hybrid and in AR mode, and holds each to the reference.
func checkHybridScenes(t *testing.T, goldenFile, dir string) {
	t.Helper()
	f := loadGolden(t, goldenFile)
	p := openPipeline(t, OpenOptions{Settings: engine.Settings{InTokenLimit: f.Runs[0].InTokenLimit, MaxNewTokens: 48, MaxNewTokensCap: 64}, WeightsDir: dir})
	if got := p.Info().GenerationModes; !slices.Equal(got, engine.GenerationModes) {
		t.Errorf("Info().GenerationModes = %v, want %v", got, engine.GenerationModes)
	}
	same, close, compared := 0, 0, 0
	worst := 0.0
	types := map[blockdecode.Type]int{}
	for i := range f.Runs {
		run := &f.Runs[i]
		if run.InTokenLimit != f.Runs[0].InTokenLimit {
			t.Fatalf("%s: in-token limit %d", run.Case, run.InTokenLimit)
		}
		pred, err := p.Generate(context.Background(), prepareRun(t, p, run))
		if err != nil {
			t.Fatal(err)
		}
		d := firstDifference(run, pred.Tokens)
		if d < 0 {
			same++
			if pred.DecodeSteps != len(run.Steps) {
				t.Errorf("%s: %d steps, reference %d", run.Case, pred.DecodeSteps, len(run.Steps))
			}
			// Each token's probability, which the answer's scores are made of, is the
			// reference's where the record holds it.
			at := 0
			for _, s := range run.Steps {
				types[s.Type]++
				want, ok := s.CommittedProbs()
				for j := range want {
					if ok[j] {
						compared++
						worst = max(worst, math.Abs(float64(pred.Probs[at+j]-want[j])))
					}
				}
				at += len(s.Committed)
			}
			continue
		}
		why := closeCall(&run.Steps[d])
		if why == "" {
			t.Errorf("%s: differs from the reference at step %d (%s %s, committed %v), a clear decision:\n got %v\nwant %v",
				run.Case, d, run.Steps[d].Kind, run.Steps[d].Type, run.Steps[d].Committed, pred.Tokens, run.Tokens)
			continue
		}
		close++
		t.Logf("%s: differs at step %d, within tolerance: %s", run.Case, d, why)
	}
	t.Logf("%d of %d scenes token for token as the reference, %d differ at a decision within tolerance; steps of the equal ones by type %v",
		same, len(f.Runs), close, types)
	t.Logf("%d token probabilities compared, the largest difference %.3g", compared, worst)
	if compared < 1000 || worst > 1e-4 {
		t.Errorf("%d token probabilities compared, the largest difference %.3g, want at most 1e-4", compared, worst)
	}
	// And AR mode is the reference's slow mode, scene for scene: the baseline the
	// benchmark compares hybrid with.
	for i := range f.Runs {
		run := &f.Runs[i]
		prep := prepareRun(t, p, run)
		prep.GenerationMode = engine.GenerationAR
		pred, err := p.Generate(context.Background(), prep)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pred.Tokens, run.SlowTokens) || pred.GenerationMode != engine.GenerationAR {
			t.Errorf("%s in AR mode (%s):\n got %v\nwant %v", run.Case, pred.GenerationMode, pred.Tokens, run.SlowTokens)
		}
	}
	for _, ty := range []blockdecode.Type{blockdecode.TypeCoordBox, blockdecode.TypeErrorBox, blockdecode.TypeCoordAR,
		blockdecode.TypeBoxEndAR, blockdecode.TypeRefObject, blockdecode.TypeEmptyBox, blockdecode.TypeIMEnd} {
		if types[ty] == 0 {
			t.Errorf("no scene that agrees exercised %s", ty)
		}
	}
}
