package enginetest

import (
	"fmt"

	"github.com/locateanything/detect/engine"
)

// Stepper is what the step helpers drive: a backend's one decoder entry point.
type Stepper interface {
	Step(slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow) error
}

// The backends' tests drive a slot in three ways, all through Step: a prefill is a step on
// a free slot with the whole prompt pending, a decode step one pending token per slot,
// greedy (k = 1, nothing watched).

// PrefillStep runs ids into the free slot and returns the greedy first token and its
// probability.
func PrefillStep(b Stepper, slot int, ids []int32) (first int32, prob float32, err error) {
	rows := engine.NewStepRows(1, 1, 0)
	if err := b.Step([]engine.StepSlot{{Slot: slot, Pending: ids}}, 1, nil, rows); err != nil {
		return 0, 0, err
	}
	return rows[0].TopIDs[0], rows[0].TopProbs[0], nil
}

// PrefillCacheStep runs ids into the free slot and picks no token (hybrid decoding then
// starts with a block step).
func PrefillCacheStep(b Stepper, slot int, ids []int32) error {
	return b.Step([]engine.StepSlot{{Slot: slot, Pending: ids, NoOutput: true}}, 1, nil, nil)
}

// DecodeStep appends tokens[i] to slots[i] and writes the greedy next token to next[i],
// and its probability to prob[i] when prob is not nil.
func DecodeStep(b Stepper, slots []int, tokens, next []int32, prob []float32) error {
	if len(tokens) != len(slots) || len(next) != len(slots) || (prob != nil && len(prob) != len(slots)) {
		return fmt.Errorf("decode step: %d slots, %d tokens, %d outputs, %d probabilities", len(slots), len(tokens), len(next), len(prob))
	}
	ss := make([]engine.StepSlot, len(slots))
	for i, s := range slots {
		ss[i] = engine.StepSlot{Slot: s, Pending: tokens[i : i+1 : i+1]}
	}
	rows := engine.NewStepRows(len(slots), 1, 0)
	if err := b.Step(ss, 1, nil, rows); err != nil {
		return err
	}
	for i, r := range rows {
		next[i] = r.TopIDs[0]
		if prob != nil {
			prob[i] = r.TopProbs[0]
		}
	}
	return nil
}
