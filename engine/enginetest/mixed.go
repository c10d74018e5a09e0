package enginetest

import (
	"fmt"
	"slices"

	"github.com/locateanything/detect/engine"
)

// Checks of engine.Backend.Step's contract that every backend's tests run the same way
// (the CPU backend and the ttnn bridge in engine/native, the simulated chip in engine/sim).

// StepIsItsSlotsAlone runs step, several slots in one Step, and then the same slots each in
// a Step of its own, in order, both from the state setup makes (it is called before each),
// and wants the same output rows, bit for bit: a slot's rows do not depend on what the
// other slots of its step hold (a free slot's prefill, another slot's block, an AR row).
// follow builds a next step from the rows (every slot's next token, say); it runs after
// both and must give the same rows too, so the slots were left in the same state (a
// block's rows never kept, a prefill kept).
func StepIsItsSlotsAlone(b Stepper, setup func() error, step []engine.StepSlot, k int, watch []int32,
	follow func(rows []engine.StepRow) []engine.StepSlot) error {
	if err := setup(); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	together := engine.NewStepRows(engine.StepRows(step), k, len(watch))
	if err := b.Step(step, k, watch, together); err != nil {
		return fmt.Errorf("the slots in one step: %w", err)
	}
	next := follow(together)
	togetherNext := engine.NewStepRows(engine.StepRows(next), k, len(watch))
	if err := b.Step(next, k, watch, togetherNext); err != nil {
		return fmt.Errorf("the step after the slots in one step: %w", err)
	}

	if err := setup(); err != nil {
		return fmt.Errorf("setup again: %w", err)
	}
	var alone []engine.StepRow
	for _, ss := range step {
		rows := engine.NewStepRows(engine.StepRows([]engine.StepSlot{ss}), k, len(watch))
		if err := b.Step([]engine.StepSlot{ss}, k, watch, rows); err != nil {
			return fmt.Errorf("slot %d alone: %w", ss.Slot, err)
		}
		alone = append(alone, rows...)
	}
	aloneNext := engine.NewStepRows(len(togetherNext), k, len(watch))
	if err := b.Step(next, k, watch, aloneNext); err != nil {
		return fmt.Errorf("the step after the slots alone: %w", err)
	}
	if err := sameRows("the step", together, alone); err != nil {
		return err
	}
	return sameRows("the step after it", togetherNext, aloneNext)
}

// sameRows says where two steps' rows differ, if they do.
func sameRows(what string, together, alone []engine.StepRow) error {
	if len(together) != len(alone) {
		return fmt.Errorf("%s: %d rows in one step, %d alone", what, len(together), len(alone))
	}
	for r := range together {
		a, b := together[r], alone[r]
		if !slices.Equal(a.TopIDs, b.TopIDs) || !slices.Equal(a.TopProbs, b.TopProbs) || !slices.Equal(a.Watch, b.Watch) {
			return fmt.Errorf("%s: row %d is %+v with the other slots, %+v alone", what, r, a, b)
		}
	}
	return nil
}
