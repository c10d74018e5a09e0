package sim_test

import (
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/engine/prompt"
)

// TestImageIDOnlyInAFreeSlotsPrompt: the simulated chip refuses the image-context id in a
// live slot's pending tokens or in a block as every backend does, and the refusals leave
// the slot as it was: its next step is its twin's.
func TestImageIDOnlyInAFreeSlotsPrompt(t *testing.T) {
	f := newFixture(t, zeroCosts, 2)
	img, _ := f.tok.ID(prompt.ImageToken)
	r := f.newRequest(t, 4, engine.TaskDetect, "person")
	first, _ := f.start(t, r, 0)
	if twinFirst, _ := f.start(t, r, 1); twinFirst != first {
		t.Fatalf("twin slots start with %d and %d", first, twinFirst)
	}
	got, err := enginetest.ImageIDOutsideAPrompt(f.b, 0, img, r.ids[len(r.ids)-1], first)
	if err != nil {
		t.Fatal(err)
	}
	twin := engine.NewStepRows(1, 1, 0)
	if err := f.b.Step([]engine.StepSlot{{Slot: 1, Pending: []int32{first}}}, 1, nil, twin); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.TopIDs, twin[0].TopIDs) || !slices.Equal(got.TopProbs, twin[0].TopProbs) {
		t.Fatalf("after the refusals the slot steps to %+v, its twin to %+v", got, twin[0])
	}
}
