package enginetest

import (
	"fmt"
	"strings"

	"github.com/locateanything/detect/engine"
)

// ImageIDRefusal is what every backend's refusal of the image-context id outside a free
// slot's prompt says: images come only with a prefill.
const ImageIDRefusal = "only a free slot's prompt may hold"

// ImageIDOutsideAPrompt puts the image-context id imageID where only a free slot's prompt
// may hold it, on the live slot: among its pending tokens, and in a block (with and
// without pending tokens before it); last is the slot's last committed token and next a
// token it may take next, so that only the image id is wrong. Every such step must be
// refused with ImageIDRefusal. It then steps next on the slot and returns that row (greedy),
// for the caller to compare with a twin slot's: the refusals changed nothing.
func ImageIDOutsideAPrompt(b Stepper, slot int, imageID, last, next int32) (engine.StepRow, error) {
	for _, ss := range []engine.StepSlot{
		{Slot: slot, Pending: []int32{imageID}},
		{Slot: slot, Pending: []int32{next, imageID}},
		{Slot: slot, Block: []int32{last, imageID}},
		{Slot: slot, Pending: []int32{next}, Block: []int32{next, imageID}},
	} {
		rows := engine.NewStepRows(engine.StepRows([]engine.StepSlot{ss}), 1, 0)
		err := b.Step([]engine.StepSlot{ss}, 1, nil, rows)
		if err == nil {
			return engine.StepRow{}, fmt.Errorf("a step with the image-context id on live slot %d (pending %v, block %v) was run", slot, ss.Pending, ss.Block)
		}
		if !strings.Contains(err.Error(), ImageIDRefusal) {
			return engine.StepRow{}, fmt.Errorf("pending %v, block %v: refused with %q, which does not say %q", ss.Pending, ss.Block, err, ImageIDRefusal)
		}
	}
	rows := engine.NewStepRows(1, 1, 0)
	if err := b.Step([]engine.StepSlot{{Slot: slot, Pending: []int32{next}}}, 1, nil, rows); err != nil {
		return engine.StepRow{}, fmt.Errorf("slot %d after the refusals: %w", slot, err)
	}
	return rows[0], nil
}
