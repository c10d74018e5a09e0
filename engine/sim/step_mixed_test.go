package sim_test

import (
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
)

// TestOneStepHoldsAPrefillABlockAndADecode: on the simulated chip too, one step holding a
// free slot's prefill, a live slot's block (rows not kept) and another live slot's AR row
// gives the rows of the three run in steps of their own, and leaves the slots in the same
// state (the next step's rows agree too): the contract engine/native's backends are held
// to by the same check.
func TestOneStepHoldsAPrefillABlockAndADecode(t *testing.T) {
	f := newFixture(t, zeroCosts, 3)
	mask, _ := f.tok.ID("<text_mask>")
	eos := f.eos
	reqs := []request{
		f.newRequest(t, 1, engine.TaskDetect, "person"),
		f.newRequest(t, 2, engine.TaskDetect, "red car"),
		f.newRequest(t, 3, engine.TaskDetect, "dog</c>cat"),
	}
	var first int32 // slot 2's first token, which its AR row feeds
	setup := func() error {
		for s := range 3 {
			if err := f.b.Release(s); err != nil {
				return err
			}
		}
		if err := f.b.Vision(reqs[1].patches, reqs[1].gridH, reqs[1].gridW); err != nil {
			return err
		}
		if err := prefillCacheStep(f.b, 1, reqs[1].ids); err != nil {
			return err
		}
		if err := f.b.Vision(reqs[2].patches, reqs[2].gridH, reqs[2].gridW); err != nil {
			return err
		}
		var err error
		if first, _, err = prefillStep(f.b, 2, reqs[2].ids); err != nil {
			return err
		}
		// The image slot 0's prefill takes, in the step.
		return f.b.Vision(reqs[0].patches, reqs[0].gridH, reqs[0].gridW)
	}
	if err := setup(); err != nil {
		t.Fatal(err)
	}
	last1 := reqs[1].ids[len(reqs[1].ids)-1]
	step := []engine.StepSlot{
		{Slot: 2, Pending: []int32{first}}, // an AR row
		{Slot: 0, Pending: reqs[0].ids},
		{Slot: 1, Block: []int32{last1, mask, mask, mask, mask, mask}},
	}
	follow := func(rows []engine.StepRow) []engine.StepSlot {
		return []engine.StepSlot{
			{Slot: 0, Pending: []int32{rows[1].TopIDs[0]}},
			{Slot: 1, Pending: []int32{rows[2].TopIDs[0]}}, // the block's row 0: the answer's first token
			{Slot: 2, Pending: []int32{rows[0].TopIDs[0]}},
		}
	}
	if err := enginetest.StepIsItsSlotsAlone(f.b, setup, step, 5, []int32{mask, eos}, follow); err != nil {
		t.Fatal(err)
	}
}
