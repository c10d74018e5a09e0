package native

import (
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/enginetest"
)

// contractBackends are the backends here that hold Step's contract, on the bundled model:
// the CPU backend, and the ttnn bridge on its stand-in adapter (numpy, engine/ttnn), which
// runs the bridge's checks and the adapter protocol without a chip.
func contractBackends(t *testing.T, m *checkpoint.Model) []struct {
	name string
	b    *Backend
} {
	t.Helper()
	o := Options{MaxBatch: 3, MaxSeqLen: 128, Threads: 2}
	tt := o
	tt.BackendOptions = standinOptions(t)
	return []struct {
		name string
		b    *Backend
	}{{"cpu", openBackend(t, m, o)}, {"ttnn", openTTNN(t, m, tt)}}
}

// textPrompt is a prompt of n ids of the bundled model's vocabulary, without the image id.
func textPrompt(first, n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(first + 7*i)
	}
	return ids
}

// TestImageIDOnlyInAFreeSlotsPrompt: the image-context id in a live slot's pending tokens
// or in a block is refused on every backend (images come with a prefill), and the
// refusals leave the slot as it was: its next step is its twin's.
func TestImageIDOnlyInAFreeSlotsPrompt(t *testing.T) {
	lockThread(t)
	m := openModel(t, shapesDir)
	img := int32(m.Config.ImageTokenID)
	prompt := textPrompt(20, 30)
	for _, be := range contractBackends(t, m) {
		t.Run(be.name, func(t *testing.T) {
			b := be.b
			first, _, err := prefillStep(b, 0, prompt)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := prefillStep(b, 1, prompt); err != nil {
				t.Fatal(err)
			}
			got, err := enginetest.ImageIDOutsideAPrompt(b, 0, img, prompt[len(prompt)-1], first)
			if err != nil {
				t.Fatal(err)
			}
			twin, err := runStep(b, []engine.StepSlot{{Slot: 1, Pending: []int32{first}}}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.TopIDs, twin[0].TopIDs) || !slices.Equal(got.TopProbs, twin[0].TopProbs) {
				t.Fatalf("after the refusals the slot steps to %+v, its twin to %+v", got, twin[0])
			}
		})
	}
}
