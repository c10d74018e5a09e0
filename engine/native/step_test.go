package native

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
)

// The step of parallel box decoding (docs/hybrid-decoding.md) on the CPU backend: its AR
// row is a decode step, pending tokens are decode steps one after another, a block leaves
// the cache as it found it, and the block rows agree with the PyTorch reference.

// shapesDir is the bundled model: a real vocabulary of 1424 ids behind a small network.
const shapesDir = "../../models/tiny-shapes"

// stepModels are the checkpoints the step tests run on, with a prompt each: the golden
// case of the random checkpoints (an image) and a text prompt on the bundled model.
func stepModels(t *testing.T) []struct {
	name, dir string
	seq       batchSeq
} {
	t.Helper()
	shapesPrompt := make([]int32, 40) // ids below 1424 and no image token
	for i := range shapesPrompt {
		shapesPrompt[i] = int32(20 + 7*i)
	}
	return []struct {
		name, dir string
		seq       batchSeq
	}{
		{"tiny-bf16", filepath.Join(checkpointsDir, "tiny-bf16"), batchSpecs(t, "tiny-bf16")[0]},
		{"tiny-f32", filepath.Join(checkpointsDir, "tiny-f32"), batchSpecs(t, "tiny-f32")[1]},
		{"tiny-shapes", shapesDir, batchSeq{name: "text", ids: shapesPrompt}},
	}
}

// runStep runs one Step and returns its rows.
func runStep(b *Backend, slots []engine.StepSlot, k int, watch []int32) ([]engine.StepRow, error) {
	rows := engine.NewStepRows(engine.StepRows(slots), k, len(watch))
	return rows, b.Step(slots, k, watch, rows)
}

// checkStepRow holds one output row to its logits: probabilities within 1e-5 (relative)
// of a float64 softmax, most probable first with equal probabilities in ascending id
// order, no id left out that is more probable than the last one kept, and the watched ids'
// probabilities.
func checkStepRow(t *testing.T, what string, row engine.StepRow, logits []float32, watch []int32) {
	t.Helper()
	if len(logits) == 0 {
		t.Fatalf("%s: no logits", what)
	}
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	prob := func(id int32) float64 { return math.Exp(float64(logits[id])-mx) / sum }
	close := func(got float32, want float64) bool {
		return math.Abs(float64(got)-want) <= 1e-5*want+1e-30
	}
	k := len(row.TopIDs)
	for a := range k {
		id := row.TopIDs[a]
		if id < 0 || int(id) >= len(logits) {
			t.Fatalf("%s: top id %d is %d", what, a, id)
		}
		if !close(row.TopProbs[a], prob(id)) {
			t.Errorf("%s: top %d (id %d) probability %g, softmax gives %g", what, a, id, row.TopProbs[a], prob(id))
		}
		if a > 0 {
			prev := row.TopIDs[a-1]
			if row.TopProbs[a] > row.TopProbs[a-1] || (row.TopProbs[a] == row.TopProbs[a-1] && id < prev) {
				t.Errorf("%s: top %d (id %d, p %g) ranks above top %d (id %d, p %g)", what, a, id, row.TopProbs[a], a-1, prev, row.TopProbs[a-1])
			}
		}
	}
	last := prob(row.TopIDs[k-1])
	for id := range logits {
		if p := prob(int32(id)); p > last*(1+1e-5) && !slices.Contains(row.TopIDs, int32(id)) {
			t.Fatalf("%s: id %d (p %g) is missing from the top %d %v (last p %g)", what, id, p, k, row.TopIDs, last)
		}
	}
	for j, id := range watch {
		if !close(row.Watch[j], prob(id)) {
			t.Errorf("%s: watched id %d probability %g, softmax gives %g", what, id, row.Watch[j], prob(id))
		}
	}
}

// TestStepARRowMatchesDecode: a step with one pending token and no block is a decode
// step: the same token, the same probability and the same logits, bit for bit, step after
// step (so the cache it keeps is decode's too).
func TestStepARRowMatchesDecode(t *testing.T) {
	lockThread(t)
	for _, mc := range stepModels(t) {
		t.Run(mc.name, func(t *testing.T) {
			m := openModel(t, mc.dir)
			o := Options{MaxBatch: 1, MaxSeqLen: 160, Threads: 2}
			dec, stp := openBackend(t, m, o), openBackend(t, m, o)
			tok, prob, err := startBatchSeq(dec, mc.seq, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			tok2, prob2, err := startBatchSeq(stp, mc.seq, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			if tok2 != tok || prob2 != prob {
				t.Fatalf("two engines disagree on the prefill: %d %g, %d %g", tok, prob, tok2, prob2)
			}
			watch := []int32{0, 1, 17, 100, tok}
			next, p := []int32{0}, []float32{0}
			for step := range 12 {
				if err := dec.Decode([]int{0}, []int32{tok}, next, p); err != nil {
					t.Fatal(err)
				}
				rows, err := runStep(stp, []engine.StepSlot{{Slot: 0, Pending: []int32{tok}}}, engine.StepMaxK, watch)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if len(rows) != 1 {
					t.Fatalf("step %d: %d rows, want 1", step, len(rows))
				}
				r := rows[0]
				if r.TopIDs[0] != next[0] || math.Float32bits(r.TopProbs[0]) != math.Float32bits(p[0]) {
					t.Fatalf("step %d: top id %d p %g, decode %d p %g", step, r.TopIDs[0], r.TopProbs[0], next[0], p[0])
				}
				want := dec.Logits(0)
				if ok, where := sameLogitBits(stp.Logits(0), want); !ok {
					t.Fatalf("step %d: logits differ from decode's: %s", step, where)
				}
				if stp.Logits(1) != nil {
					t.Fatalf("step %d: a one-row step exposes logits row 1", step)
				}
				checkStepRow(t, fmt.Sprintf("step %d", step), r, want, watch)
				tok = next[0]
				watch[4] = tok
			}
		})
	}
}
