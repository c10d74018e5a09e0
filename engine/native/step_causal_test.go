package native

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
)

// TestBlockCausalFollowsTheCheckpoint: on the block model with text_config.causal_attn set,
// a block's rows see their block causally on every backend, as upstream's mask does then:
// on the CPU backend block row i is the next-token row of the committed tokens followed by
// i <text_mask> (a prefill of that sequence, the same ranking and probabilities within
// rounding), which the both-ways mask of the checkpoint without the flag is not; the ttnn
// bridge passes the flag to its adapter (the stand-in here), whose rows are the CPU's.
func TestBlockCausalFollowsTheCheckpoint(t *testing.T) {
	lockThread(t)
	src := filepath.Join(hybridGoldens, "tiny-shapes-blocks")
	dir := t.TempDir()
	if err := enginetest.CopyWithTextConfig(src, dir, map[string]any{"causal_attn": true}); err != nil {
		t.Fatal(err)
	}
	m := openModel(t, dir)
	if !m.Config.Text.CausalAttn {
		t.Fatal("the copy's causal_attn was not read")
	}
	mask := int32(m.Config.TextMaskTokenID)
	o := Options{MaxBatch: 2, MaxSeqLen: 128, Threads: 2}
	cpu := openBackend(t, m, o)
	both := openBackend(t, openModel(t, src), o)
	tt := o
	tt.BackendOptions = standinOptions(t)
	ttnn := openTTNN(t, m, tt)

	committed := textPrompt(20, 30)
	block := append([]int32{committed[len(committed)-1]}, slices.Repeat([]int32{mask}, 5)...)
	watch := []int32{mask, 412, 416}
	blockRows := func(b *Backend) []engine.StepRow {
		t.Helper()
		if err := b.Release(0); err != nil {
			t.Fatal(err)
		}
		if err := prefillCacheStep(b, 0, committed); err != nil {
			t.Fatal(err)
		}
		rows, err := runStep(b, []engine.StepSlot{{Slot: 0, Block: block}}, 5, watch)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	got, gotTT, bothWays := blockRows(cpu), blockRows(ttnn), blockRows(both)
	for i := range got {
		if err := closeRows(got[i], gotTT[i]); err != nil {
			t.Errorf("block row %d on ttnn: %v", i, err)
		}
		if err := cpu.Release(1); err != nil {
			t.Fatal(err)
		}
		seq := append(slices.Clone(committed), slices.Repeat([]int32{mask}, i)...)
		causal, err := runStep(cpu, []engine.StepSlot{{Slot: 1, Pending: seq}}, 5, watch)
		if err != nil {
			t.Fatal(err)
		}
		if err := closeRows(got[i], causal[0]); err != nil {
			t.Errorf("block row %d against the causal prefill of %d masks: %v", i, i, err)
		}
	}
	if slices.Equal(got[0].TopProbs, bothWays[0].TopProbs) {
		t.Error("block row 0 is the same under the both-ways mask: causal_attn did not reach the mask")
	}
}

// closeRows says how two rows of one forward computed two ways differ beyond rounding: the
// same top ids, probabilities within 1e-4 relative.
func closeRows(a, b engine.StepRow) error {
	if !slices.Equal(a.TopIDs, b.TopIDs) {
		return fmt.Errorf("top ids %v and %v", a.TopIDs, b.TopIDs)
	}
	pa, pb := append(slices.Clone(a.TopProbs), a.Watch...), append(slices.Clone(b.TopProbs), b.Watch...)
	for j := range pa {
		if d := math.Abs(float64(pa[j] - pb[j])); d > 1e-4*float64(pb[j])+1e-7 {
			return fmt.Errorf("probability %d: %g and %g", j, pa[j], pb[j])
		}
	}
	return nil
}
