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
				if err := decodeStep(dec, []int{0}, []int32{tok}, next, p); err != nil {
					t.Fatal(err)
				}
				// An empty Block, nil or not, is an AR row: one output row either way.
				var block []int32
				if step%2 == 1 {
					block = []int32{}
				}
				rows, err := runStep(stp, []engine.StepSlot{{Slot: 0, Pending: []int32{tok}, Block: block}}, engine.StepMaxK, watch)
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

// greedyTrace decodes a sequence alone in slot 0 of b for n steps after its prefill and
// returns the tokens (the prefill's first) and the logits of every decode step.
func greedyTrace(t *testing.T, b *Backend, s batchSeq, n int) ([]int32, [][]float32) {
	t.Helper()
	tok, _, err := startBatchSeq(b, s, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	tokens, logits := []int32{tok}, [][]float32{nil}
	for range n {
		if tok, err = decode1(b, tok); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		logits = append(logits, b.Logits(0))
	}
	return tokens, logits
}

// TestStepPendingTokensAreDecodes: pending tokens fed in one step are the same as feeding
// them one decode at a time: the output row is the last decode's (token and logits, bit
// for bit: each pending row runs decode's arithmetic against the rows written before it),
// and the cache they leave is decode's (later decodes agree bit for bit).
func TestStepPendingTokensAreDecodes(t *testing.T) {
	lockThread(t)
	for _, mc := range stepModels(t) {
		t.Run(mc.name, func(t *testing.T) {
			m := openModel(t, mc.dir)
			o := Options{MaxBatch: 1, MaxSeqLen: 160, Threads: 2}
			ref := openBackend(t, m, o)
			tokens, logits := greedyTrace(t, ref, mc.seq, 30)

			b := openBackend(t, m, o)
			if _, _, err := startBatchSeq(b, mc.seq, 0, false); err != nil {
				t.Fatal(err)
			}
			// tokens[i] is decoded at step i+1, giving tokens[i+1] and logits[i+1].
			at := 0
			for _, n := range []int{6, 1, 16, 2, 3} {
				rows, err := runStep(b, []engine.StepSlot{{Slot: 0, Pending: tokens[at : at+n]}}, 3, nil)
				if err != nil {
					t.Fatalf("%d pending after %d: %v", n, at, err)
				}
				at += n
				if rows[0].TopIDs[0] != tokens[at] {
					t.Errorf("%d pending: next token %d, one decode at a time %d", n, rows[0].TopIDs[0], tokens[at])
				}
				if ok, where := sameLogitBits(b.Logits(0), logits[at]); !ok {
					t.Fatalf("%d pending: logits differ from decoding them one at a time: %s", n, where)
				}
			}
			for ; at < len(tokens)-1; at++ {
				next, err := decode1(b, tokens[at])
				if err != nil {
					t.Fatal(err)
				}
				if ok, where := sameLogitBits(b.Logits(0), logits[at+1]); next != tokens[at+1] || !ok {
					t.Fatalf("decode %d after the steps: token %d, want %d; logits: %s", at+1, next, tokens[at+1], where)
				}
			}
		})
	}
}

// TestStepBlockLeavesCacheAlone: a block step keeps its pending tokens and nothing of the
// block: decoding after it gives the same bits as decoding without it, whether the block
// came with pending tokens or none, and after several blocks in a row.
func TestStepBlockLeavesCacheAlone(t *testing.T) {
	lockThread(t)
	for _, mc := range stepModels(t) {
		t.Run(mc.name, func(t *testing.T) {
			m := openModel(t, mc.dir)
			o := Options{MaxBatch: 1, MaxSeqLen: 160, Threads: 2}
			tokens, logits := greedyTrace(t, openBackend(t, m, o), mc.seq, 12)

			b := openBackend(t, m, o)
			if _, _, err := startBatchSeq(b, mc.seq, 0, false); err != nil {
				t.Fatal(err)
			}
			mask := int32(m.Config.Text.Vocab - 3)
			block := func(last int32, n int) []int32 {
				bl := []int32{last}
				for len(bl) < n {
					bl = append(bl, mask)
				}
				return bl
			}
			last := mc.seq.ids[len(mc.seq.ids)-1]
			at := 0 // tokens[:at] are in the cache besides the prompt
			for i, s := range []struct{ pending, block int }{{0, 6}, {0, 3}, {2, 6}, {1, 16 - 1}, {0, 1}, {3, 6}} {
				slot := engine.StepSlot{Slot: 0, Pending: tokens[at : at+s.pending]}
				at += s.pending
				if at > 0 {
					last = tokens[at-1]
				}
				slot.Block = block(last, s.block)
				rows, err := runStep(b, []engine.StepSlot{slot}, 2, []int32{mask})
				if err != nil {
					t.Fatalf("block %d: %v", i, err)
				}
				if len(rows) != s.block || b.Logits(s.block-1) == nil || b.Logits(s.block) != nil {
					t.Fatalf("block %d: %d rows and logits rows, want %d", i, len(rows), s.block)
				}
				// The decode right after sees only the committed tokens.
				next, err := decode1(b, tokens[at])
				if err != nil {
					t.Fatal(err)
				}
				at++
				if ok, where := sameLogitBits(b.Logits(0), logits[at]); next != tokens[at] || !ok {
					t.Fatalf("decode after block %d: token %d, without blocks %d; logits: %s", i, next, tokens[at], where)
				}
			}
		})
	}
}
