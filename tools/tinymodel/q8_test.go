package tinymodel

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine/native"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// Where int8 weights (LA_WEIGHTS_QUANT=q8) may leave the exact path: a few scenes may
// decode other tokens, but their boxes must stay on the exact path's, and the scene
// accuracy must hold the same floors.
const (
	minQ8SameScenes = 0.80 // share of held-out scenes whose tokens equal the exact path's
	minQ8BoxIoU     = 0.70 // mean IoU of a differing scene's boxes with the exact path's, matched in order
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
		wantPrecision = "int8 decoder weights (q8, blocks of 32); prefill and vision in bf16 on AMX with f32 sums, decode f32 compute"
	case native.MatmulAVX512BF16:
		wantPrecision = "int8 decoder weights (q8, blocks of 32); prefill and vision in bf16 on AVX512-BF16 with f32 sums, decode f32 compute"
	}
	if got := q8.Info().Precision; got != wantPrecision {
		t.Errorf("q8 engine reports precision %q, want %q", got, wantPrecision)
	}

	var tallyExact, tallyQ8 shapes.Tally
	same, differ := 0, 0
	var iouSum float64
	var boxPairs int
	for _, sc := range set.Scenes {
		data, err := os.ReadFile(filepath.Join("testdata", sc.File))
		if err != nil {
			t.Fatal(err)
		}
		_, want := predict(t, exact, data, sc.Query, sc.Task, sc.File)
		_, got := predict(t, q8, data, sc.Query, sc.Task, sc.File)
		if slices.Equal(got.Tokens, want.Tokens) {
			same++
		} else {
			differ++
			a, b := normBoxes(want.Detections), normBoxes(got.Detections)
			for i := range min(len(a), len(b)) {
				iouSum += shapes.IoU(a[i], b[i])
				boxPairs++
			}
			t.Logf("%s (%s %q): q8 %q, exact %q", sc.File, sc.Task, sc.Query, got.RawText, want.RawText)
		}
		if sc.Kind == detectKindToCheck {
			tallyExact.Add(truthBoxes(sc.Truth), normBoxes(want.Detections))
			tallyQ8.Add(truthBoxes(sc.Truth), normBoxes(got.Detections))
		}
	}
	t.Logf("%d of %d scenes decode the same tokens on int8 weights", same, same+differ)
	if boxPairs > 0 {
		t.Logf("differing scenes: mean IoU %.3f over %d boxes matched in order", iouSum/float64(boxPairs), boxPairs)
		if iouSum/float64(boxPairs) < minQ8BoxIoU {
			t.Errorf("differing scenes' boxes have mean IoU %.3f with the exact path's, want >= %.2f", iouSum/float64(boxPairs), minQ8BoxIoU)
		}
	}
	if float64(same) < minQ8SameScenes*float64(same+differ) {
		t.Errorf("%d of %d scenes decode the same tokens, want at least %.0f%%", same, same+differ, 100*minQ8SameScenes)
	}
	assertFloors(t, "bf16 weights", tallyExact)
	assertFloors(t, "q8 weights", tallyQ8)
}
