package native

import (
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
)

// TestOneStepHoldsAPrefillABlockAndADecode: one step holding a free slot's prefill, a
// live slot's pending token and block (rows not kept) and another live slot's AR row gives
// the rows of the three run in steps of their own, bit for bit, and leaves the same caches
// (the next step's rows agree too).
func TestOneStepHoldsAPrefillABlockAndADecode(t *testing.T) {
	lockThread(t)
	m := openModel(t, shapesDir)
	mask := int32(m.Config.TextMaskTokenID)
	for _, be := range contractBackends(t, m) {
		t.Run(be.name, func(t *testing.T) {
			b := be.b
			setup := func() error {
				for s := range 3 {
					if err := b.Release(s); err != nil {
						return err
					}
				}
				if err := prefillCacheStep(b, 1, textPrompt(20, 30)); err != nil {
					return err
				}
				_, _, err := prefillStep(b, 2, textPrompt(31, 25))
				return err
			}
			step := []engine.StepSlot{
				{Slot: 2, Pending: []int32{77}}, // an AR row
				{Slot: 0, Pending: textPrompt(40, 20)},
				{Slot: 1, Pending: []int32{300}, Block: []int32{300, mask, mask, mask, mask, mask}},
			}
			follow := func(rows []engine.StepRow) []engine.StepSlot {
				return []engine.StepSlot{
					{Slot: 0, Pending: []int32{rows[1].TopIDs[0]}},
					{Slot: 1, Pending: []int32{rows[2].TopIDs[0]}},
					{Slot: 2, Pending: []int32{rows[0].TopIDs[0]}},
				}
			}
			if err := enginetest.StepIsItsSlotsAlone(b, setup, step, 5, []int32{mask, 412, 416}, follow); err != nil {
				t.Fatal(err)
			}
		})
	}
}
