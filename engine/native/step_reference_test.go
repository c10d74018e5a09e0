package native

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/imageproc"
)

// The hybrid goldens (tools/refmodel/testdata/hybrid, docs/hybrid-decoding.md "Goldens")
// record every forward of the PyTorch reference's parallel box decoding: what was pending,
// the block, and what each output row predicted. These tests replay each recorded step
// through Step, feeding the tokens the reference committed, and compare the rows.

const hybridGoldens = "../../tools/refmodel/testdata/hybrid"

type hybridTokenIDs struct {
	BoxStart  int32 `json:"box_start"`
	BoxEnd    int32 `json:"box_end"`
	RefStart  int32 `json:"ref_start"`
	None      int32 `json:"none"`
	Null      int32 `json:"null"`
	ImEnd     int32 `json:"im_end"`
	TextMask  int32 `json:"text_mask"`
	BlockSize int   `json:"block_size"`
}

type hybridStep struct {
	Kind    string    `json:"kind"`
	Pending int       `json:"pending"`
	Slot0   int       `json:"slot0"`
	X0      []int32   `json:"x0"`
	X0P     []float64 `json:"x0_p"`
	Margins []float64 `json:"margins"`
	Top     struct {
		IDs    [][]int32   `json:"ids"`
		Logits [][]float64 `json:"logits"`
	} `json:"top"`
	Box struct {
		PBoxStart float64 `json:"p_box_start"`
		PNone1    float64 `json:"p_none_1"`
		PBoxEnd2  float64 `json:"p_box_end_2"`
		PNull3    float64 `json:"p_null_3"`
		PNull4    float64 `json:"p_null_4"`
		EndScore  float64 `json:"end_score"`
	} `json:"box"`
	Ref *struct { // nil where the rules did not consult the label reading
		PRefStart float64 `json:"p_ref_start"`
	} `json:"ref"`
	Token  int32   `json:"token"` // an AR step's argmax
	P      float64 `json:"p"`
	Margin float64 `json:"margin"`
}

type hybridRun struct {
	Case         string       `json:"case"`
	Image        string       `json:"image"`
	InTokenLimit int          `json:"in_token_limit"`
	PromptIDs    []int32      `json:"prompt_ids"`
	Mode         string       `json:"mode"`
	Tokens       []int32      `json:"tokens"`
	Steps        []hybridStep `json:"steps"`
}

type hybridGolden struct {
	Checkpoint string         `json:"checkpoint"`
	TokenIDs   hybridTokenIDs `json:"token_ids"`
	Runs       []hybridRun    `json:"runs"`
}

func readHybridGolden(t *testing.T, name string) hybridGolden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(hybridGoldens, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g hybridGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	if len(g.Runs) == 0 || g.TokenIDs.BlockSize < 2 {
		t.Fatalf("%s.json: %d runs, block size %d", name, len(g.Runs), g.TokenIDs.BlockSize)
	}
	return g
}

// Agreement with the reference (docs/hybrid-decoding.md, "Agreement"). The engine computes
// in float32 from the same weights as the reference, in another order: the logits move by
// about 1e-5 relative. refLogitTol bounds that move; two ids whose logits are closer than
// twice it may rank either way, and a recorded row margin below it leaves the argmax open.
const (
	refLogitTol = 5e-4
	refProbTol  = 1e-3 // relative, for the probabilities the rules compare with thresholds
)

// refStats counts what a replay compared, so a test can insist that it compared enough.
type refStats struct {
	blockRows, arSteps, exactTop, nearTies int
	maxLogitDiff, maxProbDiff              float64
}

// replayRun replays one recorded run in slot 0 of b (MaxBatch 1), whose image patches are
// given, and compares every step with the record.
func replayRun(t *testing.T, b *Backend, ids hybridTokenIDs, run hybridRun, patches []float32, gh, gw int, st *refStats) {
	t.Helper()
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := b.Vision(patches, gh, gw); err != nil {
		t.Fatalf("vision: %v", err)
	}
	// The first step's pending tokens are the prompt: run them as a prefill without a
	// first token (docs/hybrid-decoding.md: a prefill then the block alone is the same
	// forward), then the block with nothing pending.
	if len(run.Steps) == 0 || run.Steps[0].Kind != "block" || run.Steps[0].Pending != len(run.PromptIDs) {
		t.Fatalf("the run does not start with a block after the whole prompt")
	}
	if err := prefillCacheStep(b, 0, run.PromptIDs); err != nil {
		t.Fatalf("prefill: %v", err)
	}
	committed := append(slices.Clone(run.PromptIDs), run.Tokens...)
	cached := len(run.PromptIDs)
	watch := []int32{ids.BoxStart, ids.None, ids.BoxEnd, ids.Null, ids.ImEnd, ids.RefStart}
	for si, s := range run.Steps {
		what := fmt.Sprintf("step %d (%s)", si, s.Kind)
		slot := engine.StepSlot{Slot: 0}
		if si > 0 {
			if cached+s.Pending > len(committed) {
				t.Fatalf("%s: %d pending tokens after %d cached, %d committed", what, s.Pending, cached, len(committed))
			}
			slot.Pending = committed[cached : cached+s.Pending]
			cached += s.Pending
		}
		if s.Kind == "block" {
			if s.Slot0 != cached-1 {
				t.Fatalf("%s: slot 0 recorded at position %d, the replay has it at %d", what, s.Slot0, cached-1)
			}
			slot.Block = make([]int32, ids.BlockSize)
			slot.Block[0] = committed[cached-1]
			for i := 1; i < ids.BlockSize; i++ {
				slot.Block[i] = ids.TextMask
			}
		}
		rows, err := runStep(b, []engine.StepSlot{slot}, 5, watch)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if s.Kind == "ar" {
			st.arSteps++
			checkRefArgmax(t, what, rows[0], s.Token, s.P, s.Margin, st)
			continue
		}
		if len(rows) != len(s.Top.IDs) || len(rows) != len(s.X0) {
			t.Fatalf("%s: %d rows, the record has %d", what, len(rows), len(s.Top.IDs))
		}
		for r, row := range rows {
			rw := fmt.Sprintf("%s row %d", what, r)
			st.blockRows++
			checkRefTop(t, rw, row, b.Logits(r), s.Top.IDs[r], s.Top.Logits[r], st)
			checkRefArgmax(t, rw, row, s.X0[r], s.X0P[r], s.Margins[r], st)
		}
		// The probabilities the acceptance rules compare with their thresholds, as watched
		// ids (the end score is summed in float32 in the reference's order).
		endScore := (rows[5].Watch[2] + rows[5].Watch[3]) + rows[5].Watch[4]
		probs := []struct {
			name      string
			got, want float64
		}{
			{"p(<box>) of row 0", float64(rows[0].Watch[0]), s.Box.PBoxStart},
			{"p(None) of row 1", float64(rows[1].Watch[1]), s.Box.PNone1},
			{"p(</box>) of row 2", float64(rows[2].Watch[2]), s.Box.PBoxEnd2},
			{"p(<null>) of row 3", float64(rows[3].Watch[3]), s.Box.PNull3},
			{"p(<null>) of row 4", float64(rows[4].Watch[3]), s.Box.PNull4},
			{"end score of row 5", float64(endScore), s.Box.EndScore},
		}
		if s.Ref != nil {
			probs = append(probs, struct {
				name      string
				got, want float64
			}{"p(<ref>) of row 0", float64(rows[0].Watch[5]), s.Ref.PRefStart})
		}
		for _, c := range probs {
			checkRefProb(t, what+": "+c.name, c.got, c.want, st)
		}
	}
}

// checkRefProb holds a probability to the reference's within refProbTol relative (and
// 1e-7 absolute, for the tiny ones).
func checkRefProb(t *testing.T, what string, got, want float64, st *refStats) {
	t.Helper()
	d := math.Abs(got - want)
	st.maxProbDiff = max(st.maxProbDiff, d/max(want, 1e-7))
	if d > refProbTol*want+1e-7 {
		t.Errorf("%s: %g, reference %g", what, got, want)
	}
}

// checkRefArgmax holds a row's most probable id to the reference's where its margin
// (top1 - top2 logit) leaves no doubt, and its probability always.
func checkRefArgmax(t *testing.T, what string, row engine.StepRow, want int32, p, margin float64, st *refStats) {
	t.Helper()
	if row.TopIDs[0] != want && margin > 2*refLogitTol {
		t.Errorf("%s: argmax %d, reference %d (margin %g)", what, row.TopIDs[0], want, margin)
	}
	checkRefProb(t, what+": argmax probability", float64(row.TopProbs[0]), p, st)
}

// checkRefTop holds a row's five most probable ids and their logits to the reference's:
// every recorded id's logit within refLogitTol, and the same id at each rank unless the
// engine's id there has a logit within twice the tolerance of the recorded one (a near tie
// the two may break differently).
func checkRefTop(t *testing.T, what string, row engine.StepRow, logits []float32, wantIDs []int32, wantLogits []float64, st *refStats) {
	t.Helper()
	if len(logits) == 0 {
		t.Fatalf("%s: no logits", what)
	}
	for a, id := range wantIDs {
		d := math.Abs(float64(logits[id]) - wantLogits[a])
		st.maxLogitDiff = max(st.maxLogitDiff, d)
		if d > refLogitTol {
			t.Errorf("%s: logit of id %d is %g, reference %g", what, id, logits[id], wantLogits[a])
		}
		got := row.TopIDs[a]
		switch {
		case got == id:
			st.exactTop++
		case math.Abs(float64(logits[got])-wantLogits[a]) <= 2*refLogitTol:
			st.nearTies++
		default:
			t.Errorf("%s: rank %d is id %d (logit %g), reference id %d (logit %g)", what, a, got, logits[got], id, wantLogits[a])
		}
	}
}

// TestStepBlocksMatchReference replays the random checkpoints' hybrid and fast runs
// (blocks of six after six pending tokens, argmax-read text) on their golden images.
func TestStepBlocksMatchReference(t *testing.T) {
	lockThread(t)
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		t.Run(ckpt, func(t *testing.T) {
			g := readHybridGolden(t, ckpt)
			dir, idx := readGoldens(t, ckpt)
			m := openModel(t, filepath.Join(checkpointsDir, ckpt))
			b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 256, Threads: 2})
			var st refStats
			for i, run := range g.Runs {
				t.Run(fmt.Sprintf("%d-%s-%s", i, run.Case, run.Mode), func(t *testing.T) {
					ci := slices.IndexFunc(idx.Cases, func(c goldenCase) bool { return c.Name == run.Case })
					if ci < 0 {
						t.Fatalf("case %s is not among %s's goldens", run.Case, ckpt)
					}
					c := idx.Cases[ci]
					if want := readI32(t, dir, c.Files["prompt_ids"]); !slices.Equal(want, run.PromptIDs) {
						t.Fatalf("the run's prompt is not the golden case's")
					}
					replayRun(t, b, g.TokenIDs, run, readF32(t, dir, c.Files["patches"]), c.GridH, c.GridW, &st)
				})
			}
			t.Logf("%d block rows, %d AR steps; top-5 ranks %d exact, %d near ties; logits within %.2g, probabilities within %.2g relative",
				st.blockRows, st.arSteps, st.exactTop, st.nearTies, st.maxLogitDiff, st.maxProbDiff)
			if st.blockRows < 100 || st.exactTop < 5*st.blockRows*9/10 {
				t.Errorf("compared %d block rows, %d of their top-5 ranks exactly; want at least 100 and 90%%", st.blockRows, st.exactTop)
			}
		})
	}
}

// TestStepBlocksMatchReferenceShapes replays the block-trained test model's 96 held-out
// scenes: every path of the acceptance rules, AR steps among the blocks, pending runs of
// one to six tokens.
func TestStepBlocksMatchReferenceShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 96 scenes")
	}
	lockThread(t)
	g := readHybridGolden(t, "tiny-shapes-blocks")
	ckptDir := filepath.Join(hybridGoldens, "tiny-shapes-blocks")
	m := openModel(t, ckptDir)
	b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 256, Threads: 2})
	var st refStats
	for _, run := range g.Runs {
		t.Run(run.Case, func(t *testing.T) {
			patches, gh, gw := shapesPatches(t, m.Config, run)
			replayRun(t, b, g.TokenIDs, run, patches, gh, gw, &st)
		})
	}
	t.Logf("%d block rows, %d AR steps; top-5 ranks %d exact, %d near ties; logits within %.2g, probabilities within %.2g relative",
		st.blockRows, st.arSteps, st.exactTop, st.nearTies, st.maxLogitDiff, st.maxProbDiff)
	if st.blockRows < 2000 || st.arSteps < 100 || st.exactTop < 5*st.blockRows*9/10 {
		t.Errorf("compared %d block rows and %d AR steps, %d top-5 ranks exactly; want 2000, 100 and 90%%", st.blockRows, st.arSteps, st.exactTop)
	}
}

// shapesPatches preprocesses a run's scene as the reference did (its in_token_limit, the
// checkpoint's mean and std, the native grid).
func shapesPatches(t *testing.T, cfg *checkpoint.Config, run hybridRun) ([]float32, int, int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../..", run.Image))
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := imageproc.Decode(data, 0)
	if err != nil {
		t.Fatalf("%s: %v", run.Image, err)
	}
	res, err := imageproc.Preprocess(img, imageproc.Options{
		InTokenLimit: run.InTokenLimit, PatchSize: cfg.Preprocessor.PatchSize, MergeKernel: cfg.Preprocessor.MergeKernel,
		Mean: cfg.Preprocessor.ImageMean, Std: cfg.Preprocessor.ImageStd,
	})
	if err != nil {
		t.Fatalf("%s: %v", run.Image, err)
	}
	return res.Patches, res.GridH, res.GridW
}
