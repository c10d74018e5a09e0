package native

import (
	"slices"
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

// TestPrefillAndItsBlockInOneStep: a free slot's step may read a block after its prompt
// (la_backend.h): the rows are those of the prompt cached without output and the block in
// the next step (bit for bit on the CPU backend, within rounding on the stand-in), and the
// slot holds the prompt only (its next row agrees).
func TestPrefillAndItsBlockInOneStep(t *testing.T) {
	lockThread(t)
	m := openModel(t, shapesDir)
	mask := int32(m.Config.TextMaskTokenID)
	prompt := textPrompt(20, 30)
	block := append([]int32{prompt[len(prompt)-1]}, mask, mask, mask, mask, mask)
	watch := []int32{mask, 412}
	for _, be := range contractBackends(t, m) {
		t.Run(be.name, func(t *testing.T) {
			b := be.b
			run := func(steps ...engine.StepSlot) []engine.StepRow {
				t.Helper()
				var rows []engine.StepRow
				for _, ss := range steps {
					r, err := runStep(b, []engine.StepSlot{ss}, 5, watch)
					if err != nil {
						t.Fatal(err)
					}
					rows = append(rows, r...)
				}
				next, err := runStep(b, []engine.StepSlot{{Slot: 0, Pending: []int32{rows[0].TopIDs[0]}}}, 5, watch)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Release(0); err != nil {
					t.Fatal(err)
				}
				return append(rows, next...)
			}
			one := run(engine.StepSlot{Slot: 0, Pending: prompt, Block: block})
			two := run(engine.StepSlot{Slot: 0, Pending: prompt, NoOutput: true}, engine.StepSlot{Slot: 0, Block: block})
			if len(one) != len(two) {
				t.Fatalf("%d rows in one step, %d in two", len(one), len(two))
			}
			for r := range one {
				exact := slices.Equal(one[r].TopIDs, two[r].TopIDs) && slices.Equal(one[r].TopProbs, two[r].TopProbs) &&
					slices.Equal(one[r].Watch, two[r].Watch)
				// Bit for bit on the CPU backend; the stand-in runs the prompt and the block
				// in one forward of another shape, so its sums round differently.
				if be.name == "cpu" && !exact {
					t.Fatalf("row %d: %+v in one step, %+v in two", r, one[r], two[r])
				}
				if err := closeRows(one[r], two[r]); err != nil {
					t.Fatalf("row %d, one step against two: %v", r, err)
				}
			}
		})
	}
}
