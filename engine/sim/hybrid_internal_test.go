package sim

import (
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/tokenizer"
)

// TestHybridReadsANegativeInOneBlock: the simulated model plans no negative (<box>None</box>),
// but its rows would give one the way a trained model does: read by the rules as an empty
// box in one block, then the end.
func TestHybridReadsANegativeInOneBlock(t *testing.T) {
	tok, err := tokenizer.Load("../../models/tiny-shapes")
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.ID("<|im_end|>")
	b, err := New(Options{Costs: Costs{Speed: 1}, MaxBatch: 1, MaxSeqLen: 256, Tokenizer: tok, EOS: eos, PatchSize: 14, MergeKernel: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := b.block
	answer := append(tok.Encode("<ref>cat</ref>"), ids.BoxStart, ids.None, ids.BoxEnd, eos)
	prompt := []int32{1, 2, 3}
	b.slots[0] = slot{live: true, plan: answer, image: 42, pos: len(prompt), prompt: len(prompt), lastPrompt: prompt[2]}

	var got []int32
	var types []blockdecode.Type
	last, pending := prompt[2], []int32(nil)
	for len(types) < 10 {
		block := append([]int32{last}, slices.Repeat([]int32{ids.TextMask}, blockdecode.Size-1)...)
		slots := []engine.StepSlot{{Slot: 0, Pending: pending, Block: block}}
		rows := engine.NewStepRows(blockdecode.Size, blockdecode.K, len(ids.Watch()))
		if err := b.Step(slots, blockdecode.K, ids.Watch(), rows); err != nil {
			t.Fatal(err)
		}
		d, err := blockdecode.Block(rows, ids, blockdecode.Hybrid, 100)
		if err != nil {
			t.Fatal(err)
		}
		got, types = append(got, d.Commit...), append(types, d.Type)
		last, pending = d.Commit[len(d.Commit)-1], d.Commit
		if d.Stop {
			break
		}
	}
	if !slices.Equal(got, answer) || !slices.Equal(types[len(types)-2:], []blockdecode.Type{blockdecode.TypeEmptyBox, blockdecode.TypeIMEnd}) {
		t.Fatalf("committed %v by %v, want %v ending in an empty box and the end", got, types, answer)
	}
}
