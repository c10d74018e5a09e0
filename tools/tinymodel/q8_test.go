package tinymodel

import (
	"bytes"
	"fmt"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/native"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// Where int8 weights (LA_WEIGHTS_QUANT=q8) may leave the exact path: a few scenes may
// decode other tokens, but their boxes must stay on the exact path's, and the scene
// accuracy must hold the same floors.
//
// The held-out share is issue 27's: the fast path at least as accurate as it was on AMX
// before the split activations (84 of 96). Measured on AVX512_BF16 (AMD Zen 5) with the
// split: 89 of 96, differing boxes at mean IoU 0.953. The IoU over a handful of differing
// scenes is no steady measure (one scene the int8 weights move by more than a bin takes
// it to 0.898 where the products are float32, on a CPU with neither AMX nor AVX512_BF16),
// so its floor here only catches boxes gone astray, and the fresh scenes (about 800 drawn
// by the Go generator) hold both figures on a larger sample: measured 87.5% and 0.943 with
// the split, 86.7% and 0.926 without, 88.8% and 0.940 with float32 products
// (docs/cpu-backend.md, Split activations).
const (
	minQ8SameScenes      = 0.875 // share of held-out scenes whose tokens equal the exact path's
	minQ8BoxIoU          = 0.85  // mean IoU of a differing scene's boxes with the exact path's, matched in order
	minQ8FreshSameScenes = 0.86  // the same share on the fresh scenes
	minQ8FreshBoxIoU     = 0.93  // and the same IoU
)

// TestHeldoutScenesQ8 runs the held-out scenes on the exact (bf16) path and on int8
// weights, and compares: tokens scene by scene, the boxes where the tokens differ, and
// each path's single-category detection figures.
func TestHeldoutScenesQ8(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the model twice on every held-out scene")
	}
	set := loadHeldout(t)
	exact, q8 := openBundled(t, set.MaxNewTokens, "bf16"), openBundled(t, set.MaxNewTokens, "q8")
	// Where the CPU has AMX or AVX512_BF16, the fast path multiplies prefill and vision in
	// bf16 too, and this is what it is measured on.
	wantPrecision := "int8 decoder weights (q8, blocks of 32), f32 compute"
	switch native.FastMatmul() {
	case native.MatmulAMX:
		wantPrecision = "int8 decoder weights (q8, blocks of 32); prefill and vision in bf16 on AMX with f32 sums, vision's activations as two bf16 each, decode f32 compute"
	case native.MatmulAVX512BF16:
		wantPrecision = "int8 decoder weights (q8, blocks of 32); prefill and vision in bf16 on AVX512-BF16 with f32 sums, vision's activations as two bf16 each, decode f32 compute"
	}
	if got := q8.Info().Precision; got != wantPrecision {
		t.Errorf("q8 engine reports precision %q, want %q", got, wantPrecision)
	}

	var tallyExact, tallyQ8 shapes.Tally
	var agree tokenAgreement
	for _, sc := range set.Scenes {
		data, err := os.ReadFile(filepath.Join("testdata", sc.File))
		if err != nil {
			t.Fatal(err)
		}
		_, want := predict(t, exact, data, sc.Query, sc.Task, sc.File)
		_, got := predict(t, q8, data, sc.Query, sc.Task, sc.File)
		if !agree.add(want, got) {
			t.Logf("%s (%s %q): q8 %q, exact %q", sc.File, sc.Task, sc.Query, got.RawText, want.RawText)
		}
		if sc.Kind == detectKindToCheck {
			tallyExact.Add(truthBoxes(sc.Truth), normBoxes(want.Detections))
			tallyQ8.Add(truthBoxes(sc.Truth), normBoxes(got.Detections))
		}
	}
	agree.check(t, "held-out", minQ8SameScenes, minQ8BoxIoU)
	assertFloors(t, "bf16 weights", tallyExact)
	assertFloors(t, "q8 weights", tallyQ8)
}

// TestFreshScenesQ8 compares the exact path and the fast path (int8 weights, and bf16
// products where the CPU has them) on about 800 scenes the Go generator draws (its point
// queries left out): the share whose tokens are the same, and the mean IoU of the boxes
// of those that differ, matched in order.
func TestFreshScenesQ8(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the model twice on 800 scenes")
	}
	exact, q8 := openBundled(t, 48, "bf16"), openBundled(t, 48, "q8")
	var agree tokenAgreement
	for i := range 1000 {
		r := rand.New(rand.NewPCG(7, uint64(i)))
		s := shapes.NewScene(r)
		q := shapes.NewQuery(r, s)
		if q.Task == "point" {
			continue
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, s.Image); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("scene %d (%s %q)", i, q.Task, q.Text)
		_, want := predict(t, exact, buf.Bytes(), q.Text, q.Task, what)
		_, got := predict(t, q8, buf.Bytes(), q.Text, q.Task, what)
		agree.add(want, got)
	}
	agree.check(t, "fresh", minQ8FreshSameScenes, minQ8FreshBoxIoU)
}

// tokenAgreement tallies how far the fast path's answers are from the exact path's: the
// scenes whose tokens are the same, and for the others the IoU of their boxes with the
// exact path's, matched in order.
type tokenAgreement struct {
	same, differ, boxPairs int
	iouSum                 float64
}

// add counts one scene's two answers and says whether their tokens are the same.
func (a *tokenAgreement) add(exact, fast *engine.Prediction) bool {
	if slices.Equal(fast.Tokens, exact.Tokens) {
		a.same++
		return true
	}
	a.differ++
	x, y := normBoxes(exact.Detections), normBoxes(fast.Detections)
	for i := range min(len(x), len(y)) {
		a.iouSum += shapes.IoU(x[i], y[i])
		a.boxPairs++
	}
	return false
}

// check logs the tally of the named scene set and holds it to its floors: the share of
// scenes with the same tokens, and the mean IoU of the differing scenes' boxes.
func (a tokenAgreement) check(t *testing.T, set string, minSame, minIoU float64) {
	t.Helper()
	share := float64(a.same) / float64(a.same+a.differ)
	t.Logf("%s scenes: %d of %d (%.1f%%) decode the same tokens on the fast path", set, a.same, a.same+a.differ, 100*share)
	if share < minSame {
		t.Errorf("%s scenes: %.1f%% decode the exact path's tokens, want >= %.1f%%", set, 100*share, 100*minSame)
	}
	if a.boxPairs > 0 {
		iou := a.iouSum / float64(a.boxPairs)
		t.Logf("%s scenes that differ: mean IoU %.3f over %d boxes matched in order", set, iou, a.boxPairs)
		if iou < minIoU {
			t.Errorf("%s scenes that differ: their boxes have mean IoU %.3f with the exact path's, want >= %.2f", set, iou, minIoU)
		}
	}
}
