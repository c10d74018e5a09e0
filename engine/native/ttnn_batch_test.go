package native

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/checkpoint/golden"
)

// The ttnn backend's batched protocol, through the real bridge and the numpy stand-in:
// several sequences share one decode call, each in its own slot, and none of them can
// tell.

// stepRecord is what one sequence produced: its tokens and, for each, the logits row it
// was chosen from.
type stepRecord struct {
	tokens []int32
	logits [][]float32
}

// softmaxProb is the softmax probability of tok under logits, summed in float64.
func softmaxProb(logits []float32, tok int32) float64 {
	top := slices.Max(logits)
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l - top))
	}
	return math.Exp(float64(logits[tok]-top)) / sum
}

// checkProb fails unless prob is tok's softmax probability under logits.
func checkProb(t *testing.T, what string, prob float32, logits []float32, tok int32) {
	t.Helper()
	if logits == nil {
		t.Fatalf("%s: no logits to check the probability against", what)
	}
	want := softmaxProb(logits, tok)
	if math.Abs(float64(prob)-want) > 1e-6 || prob <= 0 || prob > 1 {
		t.Fatalf("%s: probability %g of token %d, softmax of its logits gives %g", what, prob, tok, want)
	}
}

// caseInputs are a golden case's patches and prompt.
func caseInputs(t *testing.T, c *golden.Case) ([]float32, []int32) {
	t.Helper()
	patches, _, err := c.Float32(golden.Patches)
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err := c.Int32(golden.PromptIDs)
	if err != nil {
		t.Fatal(err)
	}
	return patches, ids
}

// runAlone runs a golden case in slot 0 of b with nothing else live, for as many tokens as
// the golden holds, recording each step's logits, and releases the slot.
func runAlone(t *testing.T, b *Backend, c *golden.Case) stepRecord {
	t.Helper()
	patches, ids := caseInputs(t, c)
	if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
		t.Fatal(err)
	}
	tok, err := prefill1(b, ids)
	if err != nil {
		t.Fatal(err)
	}
	r := stepRecord{tokens: []int32{tok}, logits: [][]float32{b.Logits(0)}}
	for len(r.tokens) < len(c.GreedyIDs) {
		if tok, err = decode1(b, tok); err != nil {
			t.Fatal(err)
		}
		r.tokens = append(r.tokens, tok)
		r.logits = append(r.logits, b.Logits(0))
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	return r
}

// batchRun is what runStaggered saw besides the sequences' records.
type batchRun struct {
	records  []stepRecord // by queue index
	maxRows  int          // the most rows one decode call carried
	reused   int          // prefills into a slot another sequence had held
	reorders int          // decode calls whose rows came in another order than admission
}

// runStaggered runs the queued cases through b's slots the way a chip owner does: a new
// sequence is admitted into a free slot every admitEvery steps (the slots are handed out
// from the highest down, and reused once released), every live sequence advances in one
// decode call per step (rows in admission order on even steps, reversed on odd ones), and
// a sequence that has its golden's length is released. Every token's probability is
// checked against its logits row.
func runStaggered(t *testing.T, b *Backend, queue []*golden.Case, admitEvery int) batchRun {
	t.Helper()
	type seq struct {
		idx  int
		c    *golden.Case
		slot int
		rec  stepRecord
	}
	var free []int
	for s := b.MaxBatch() - 1; s >= 0; s-- {
		free = append(free, s)
	}
	held := make([]bool, b.MaxBatch())
	run := batchRun{records: make([]stepRecord, len(queue))}
	var live []*seq
	admitted := 0
	for step := 0; admitted < len(queue) || len(live) > 0; step++ {
		if admitted < len(queue) && len(free) > 0 && (len(live) == 0 || step%admitEvery == 0) {
			slot := free[0]
			free = free[1:]
			c := queue[admitted]
			patches, ids := caseInputs(t, c)
			if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
				t.Fatal(err)
			}
			tok, prob, err := prefillStep(b, slot, ids)
			if err != nil {
				t.Fatalf("step %d: prefill %s into slot %d: %v", step, c.Name, slot, err)
			}
			logits := b.Logits(0)
			checkProb(t, c.Name+" prefill", prob, logits, tok)
			if held[slot] {
				run.reused++
			}
			held[slot] = true
			live = append(live, &seq{idx: admitted, c: c, slot: slot,
				rec: stepRecord{tokens: []int32{tok}, logits: [][]float32{logits}}})
			admitted++
		}

		var rows []*seq
		for _, s := range live {
			if len(s.rec.tokens) < len(s.c.GreedyIDs) {
				rows = append(rows, s)
			}
		}
		if step%2 == 1 && len(rows) > 1 {
			slices.Reverse(rows)
			run.reorders++
		}
		if n := len(rows); n > 0 {
			slots, tokens := make([]int, n), make([]int32, n)
			next, prob := make([]int32, n), make([]float32, n)
			for i, s := range rows {
				slots[i], tokens[i] = s.slot, s.rec.tokens[len(s.rec.tokens)-1]
			}
			if err := decodeStep(b, slots, tokens, next, prob); err != nil {
				t.Fatalf("step %d: decode of slots %v: %v", step, slots, err)
			}
			for i, s := range rows {
				logits := b.Logits(i)
				checkProb(t, s.c.Name+" decode", prob[i], logits, next[i])
				s.rec.tokens = append(s.rec.tokens, next[i])
				s.rec.logits = append(s.rec.logits, logits)
			}
			run.maxRows = max(run.maxRows, n)
		}

		kept := live[:0]
		for _, s := range live {
			if len(s.rec.tokens) < len(s.c.GreedyIDs) {
				kept = append(kept, s)
				continue
			}
			if err := b.Release(s.slot); err != nil {
				t.Fatal(err)
			}
			free = append(free, s.slot)
			run.records[s.idx] = s.rec
		}
		live = kept
	}
	return run
}

// TestTTNNBatchedDecodeMatchesAlone: sequences started at different steps, decoded
// together in changing row order, released and replaced in their slots (a case even
// running beside itself) give each exactly the tokens, and bit for bit the logits, it
// gives alone, which are the CPU backend's goldens.
func TestTTNNBatchedDecodeMatchesAlone(t *testing.T) {
	lockThread(t)
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		t.Run(ckpt, func(t *testing.T) {
			dir := filepath.Join(checkpointsDir, ckpt)
			set, err := golden.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			m := openModel(t, dir)
			one := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: 512, BackendOptions: standinOptions(t)})
			alone := map[string]stepRecord{}
			for i := range set.Cases {
				c := &set.Cases[i]
				r := runAlone(t, one, c)
				if !slices.Equal(r.tokens, c.GreedyIDs) {
					t.Fatalf("%s alone: tokens %v, golden %v", c.Name, r.tokens, c.GreedyIDs)
				}
				alone[c.Name] = r
			}

			c0, c1, c2 := &set.Cases[0], &set.Cases[1], &set.Cases[2]
			queue := []*golden.Case{c0, c0, c1, c2, c1}
			b := openTTNN(t, m, Options{MaxBatch: 3, MaxSeqLen: 512, BackendOptions: standinOptions(t)})
			run := runStaggered(t, b, queue, 2)
			if run.maxRows < 3 || run.reused < 2 || run.reorders == 0 {
				t.Fatalf("the schedule did not exercise batching: %d rows at most, %d slot reuses, %d reorders",
					run.maxRows, run.reused, run.reorders)
			}
			for i, c := range queue {
				got, want := run.records[i], alone[c.Name]
				if !slices.Equal(got.tokens, c.GreedyIDs) {
					t.Errorf("%s (queue %d) batched: tokens %v, golden %v", c.Name, i, got.tokens, c.GreedyIDs)
				}
				for step := range want.logits {
					if !slices.Equal(got.logits[step], want.logits[step]) {
						t.Errorf("%s (queue %d) step %d: batched logits differ from alone", c.Name, i, step)
						break
					}
				}
			}
		})
	}
}

// TestTTNNSlotRules: the bridge refuses what the ABI does not allow (a prefill into a live
// slot, a decode of a free or repeated slot or of a full cache, a token outside the
// vocabulary) before the adapter runs, so a refused call changes no slot: the others
// carry on with the tokens they would have had.
func TestTTNNSlotRules(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.BF16, lmHead: true}.write(t))
	prompt := testPrompt(2) // 24 tokens
	const maxSeqLen = 26    // room for two decoded tokens
	start := func(b *Backend, slot int) int32 {
		t.Helper()
		if err := b.Vision(testPatches(2, 4, 5), 2, 4); err != nil {
			t.Fatal(err)
		}
		tok, _, err := prefillStep(b, slot, prompt)
		if err != nil {
			t.Fatalf("prefill slot %d: %v", slot, err)
		}
		return tok
	}
	decode := func(b *Backend, slots []int, tokens []int32) ([]int32, error) {
		next := make([]int32, len(slots))
		return next, decodeStep(b, slots, tokens, next, nil)
	}

	// The tokens slot 1 has alone: its first, then two decoded.
	ref := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: maxSeqLen, BackendOptions: standinOptions(t)})
	want := []int32{start(ref, 0)}
	for range 2 {
		next, err := decode(ref, []int{0}, want[len(want)-1:])
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, next[0])
	}

	b := openTTNN(t, m, Options{MaxBatch: 3, MaxSeqLen: maxSeqLen, BackendOptions: standinOptions(t)})
	first0, first1 := start(b, 0), start(b, 1)
	if first1 != want[0] {
		t.Fatalf("slot 1 first token %d, alone %d", first1, want[0])
	}
	_, _, err := prefillStep(b, 0, prompt)
	// A live slot takes at most 16 pending ids: a whole prompt there is refused.
	wantError(t, err, "native ttnn: step: slot 0: 24 pending ids (0..16 on a live slot) and a block of 0 (0..16)")
	_, err = decode(b, []int{1, 1}, []int32{first1, first1})
	wantError(t, err, "slot 1 appears twice")
	_, err = decode(b, []int{0, 1}, []int32{first0, 152681})
	wantError(t, err, "token 152681 of slot 1 outside the vocabulary of 152681")

	// Slot 0 fills its cache; a call with it is refused whole, and slot 1 does not move.
	next, err := decode(b, []int{0}, []int32{first0})
	if err != nil {
		t.Fatal(err)
	}
	if next, err = decode(b, []int{0}, next); err != nil {
		t.Fatal(err)
	}
	_, err = decode(b, []int{1, 0}, []int32{first1, next[0]})
	wantError(t, err, "slot 0 is full (26 positions, 1 pending, a block of 0, max_seq_len 26)")
	got := []int32{first1}
	for range 2 {
		next, err := decode(b, []int{1}, got[len(got)-1:])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, next[0])
	}
	if !slices.Equal(got, want) {
		t.Fatalf("slot 1 after refused calls: %v, alone %v", got, want)
	}

	// Release frees a slot for a new prefill; releasing a free slot is no error; Logits
	// answers only for rows of the last step.
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(0); err != nil {
		t.Fatalf("releasing a free slot: %v", err)
	}
	if err := b.Release(2); err != nil {
		t.Fatalf("releasing a never used slot: %v", err)
	}
	// A step on a free slot is its prefill: one token is a prompt.
	if _, err = decode(b, []int{0}, []int32{first0}); err != nil {
		t.Fatalf("a one-token step on free slot 0: %v", err)
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	if again := start(b, 0); again != first0 {
		t.Fatalf("slot 0 after release: first token %d, before %d", again, first0)
	}
	if b.Logits(0) == nil || b.Logits(1) != nil || b.Logits(-1) != nil {
		t.Fatalf("after a prefill: Logits(0) %v, Logits(1) %v; want row 0 only", b.Logits(0) != nil, b.Logits(1) != nil)
	}
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	if b.Logits(0) != nil {
		t.Fatal("logits after reset")
	}
	for slot := range 3 { // every slot is free again: a step there is its prefill
		if _, err = decode(b, []int{slot}, []int32{first0}); err != nil {
			t.Fatalf("a one-token step on slot %d after reset: %v", slot, err)
		}
	}

	// A release the adapter fails keeps the slot: the next prefill there is refused.
	f := openTTNN(t, m, Options{MaxBatch: 2, MaxSeqLen: maxSeqLen, BackendOptions: standinOptions(t, "fail_in", "release")})
	start(f, 1)
	wantError(t, f.Release(1), "native ttnn: release: adapter release: RuntimeError: stand-in told to fail in release")
	_, _, err = prefillStep(f, 1, prompt)
	wantError(t, err, "step: slot 1: 24 pending ids (0..16 on a live slot)")
}

// TestTTNNProbabilitiesAreOptional: asking for probabilities changes no token, and a call
// that does not ask gets none.
func TestTTNNProbabilitiesAreOptional(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))
	b := openTTNN(t, m, Options{MaxBatch: 2, MaxSeqLen: 64, BackendOptions: standinOptions(t)})
	run := func(wantProb bool) ([]int32, []float32) {
		t.Helper()
		if err := b.Reset(); err != nil {
			t.Fatal(err)
		}
		var toks []int32
		var probs []float32
		for slot := range 2 {
			if err := b.Vision(testPatches(2, 2, uint64(slot+1)), 2, 2); err != nil {
				t.Fatal(err)
			}
			tok, prob, err := prefillStep(b, slot, testPrompt(1))
			if err != nil {
				t.Fatal(err)
			}
			toks, probs = append(toks, tok), append(probs, prob)
		}
		next := make([]int32, 2)
		var prob []float32
		if wantProb {
			prob = make([]float32, 2)
		}
		if err := decodeStep(b, []int{0, 1}, toks[:2], next, prob); err != nil {
			t.Fatal(err)
		}
		return append(toks, next...), append(probs, prob...)
	}
	withProb, probs := run(true)
	without, none := run(false)
	if !slices.Equal(withProb, without) {
		t.Fatalf("tokens with probabilities %v, without %v", withProb, without)
	}
	// Every greedy row of a step carries its probability: the prefills' are the same
	// whether the decode step's are read or not.
	if len(probs) != 4 || slices.Contains(probs, 0) || !slices.Equal(none, probs[:2]) {
		t.Fatalf("probabilities asked %v, not asked %v", probs, none)
	}
}
