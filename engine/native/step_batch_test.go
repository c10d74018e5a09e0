package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

// Batching never changes a step: a slot's rows (top ids, probabilities, watched
// probabilities and logits, bit for bit) are the same whether it steps alone or with
// others, AR rows and blocks mixed, in any order and any slot.

// stepScript is one sequence's steps after its prefill (without a first token): each a
// run of pending tokens and either a block or one output row.
type stepScript struct {
	seq   batchSeq
	steps []engine.StepSlot // Slot is filled in when the step runs
}

// stepOut is what one step gave one slot: its rows and their logits.
type stepOut struct {
	rows   []engine.StepRow
	logits [][]float32
}

// stepScripts draws a script for each sequence from rng: blocks of 1..8 rows after 0..6
// pending tokens, and AR rows after 1..6, with ids from the whole vocabulary; the first
// step has nothing pending or is an AR row.
func stepScripts(specs []batchSeq, vocab int, maxSeq int, rng *rand.Rand) []stepScript {
	ids := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(rng.IntN(vocab))
		}
		return out
	}
	scripts := make([]stepScript, len(specs))
	for i, s := range specs {
		scripts[i].seq = s
		pos := len(s.ids)
		for range 6 + rng.IntN(6) {
			var st engine.StepSlot
			if rng.IntN(3) == 0 {
				st.Pending = ids(1 + rng.IntN(6))
			} else {
				st.Pending = ids(rng.IntN(7))
				st.Block = ids(1 + rng.IntN(8))
			}
			if pos+len(st.Pending)+len(st.Block) > maxSeq {
				break
			}
			pos += len(st.Pending)
			scripts[i].steps = append(scripts[i].steps, st)
		}
	}
	return scripts
}

// startScript runs a sequence's vision (if any) and prefill without a first token.
func startScript(b *Backend, s batchSeq, slot int) error {
	if s.patches != nil {
		if err := b.Vision(s.patches, s.gh, s.gw); err != nil {
			return fmt.Errorf("%s: vision: %w", s.name, err)
		}
	}
	if err := prefillCacheStep(b, slot, s.ids); err != nil {
		return fmt.Errorf("%s: prefill into slot %d: %w", s.name, slot, err)
	}
	return nil
}

var stepWatch = []int32{0, 5, 359, 1422, 151645, 152678}

// runScriptAlone runs a script in slot 0 of b and releases the slot.
func runScriptAlone(t *testing.T, b *Backend, sc stepScript, vocab int) []stepOut {
	t.Helper()
	if err := startScript(b, sc.seq, 0); err != nil {
		t.Fatal(err)
	}
	watch := watchIn(vocab)
	var outs []stepOut
	for i, st := range sc.steps {
		st.Slot = 0
		rows, err := runStep(b, []engine.StepSlot{st}, 4, watch)
		if err != nil {
			t.Fatalf("%s alone, step %d: %v", sc.seq.name, i, err)
		}
		out := stepOut{rows: rows}
		for r := range rows {
			out.logits = append(out.logits, b.Logits(r))
		}
		outs = append(outs, out)
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	return outs
}

// watchIn is stepWatch without the ids a vocabulary lacks.
func watchIn(vocab int) []int32 {
	return slices.DeleteFunc(slices.Clone(stepWatch), func(id int32) bool { return int(id) >= vocab })
}

// sameStepRow reports whether two rows are identical bit for bit, and where not.
func sameStepRow(a, b engine.StepRow) (bool, string) {
	if !slices.Equal(a.TopIDs, b.TopIDs) {
		return false, fmt.Sprintf("top ids %v, alone %v", a.TopIDs, b.TopIDs)
	}
	for _, p := range [][2][]float32{{a.TopProbs, b.TopProbs}, {a.Watch, b.Watch}} {
		for i := range p[0] {
			if math.Float32bits(p[0][i]) != math.Float32bits(p[1][i]) {
				return false, fmt.Sprintf("probabilities %v, alone %v", p[0], p[1])
			}
		}
	}
	return true, ""
}

func TestStepBatchedMatchesAlone(t *testing.T) {
	lockThread(t)
	for _, kernels := range []string{"auto", "avx2", "plain"} {
		for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
			if kernels == "plain" && ckpt == "tiny-bf16" {
				continue // the plain kernels are slow on the LM head; one checkpoint does
			}
			t.Run(kernels+"/"+ckpt, func(t *testing.T) {
				m := openModel(t, filepath.Join(checkpointsDir, ckpt))
				checkStepBatched(t, m.Config.Text.Vocab, batchSpecs(t, ckpt), func(o Options) *Backend {
					return openKernels(t, m, o, kernels)
				})
			})
		}
	}
	t.Run("tiny-shapes", func(t *testing.T) {
		m := openModel(t, shapesDir)
		var specs []batchSeq
		for i := range 5 {
			ids := make([]int32, 10+7*i)
			for j := range ids {
				ids[j] = int32(20 + (j*13+i)%380)
			}
			specs = append(specs, batchSeq{name: fmt.Sprintf("text-%d", i), ids: ids})
		}
		checkStepBatched(t, m.Config.Text.Vocab, specs, func(o Options) *Backend { return openBackend(t, m, o) })
	})
}

// checkStepBatched runs each sequence's script alone and then all of them together in a
// four-slot engine: sequences join into random free slots while others run, each call
// takes the next step of a random subset of the live sequences in a random order, and
// finished sequences release their slots for the next.
func checkStepBatched(t *testing.T, vocab int, specs []batchSeq, open func(Options) *Backend) {
	const maxBatch, maxSeq = 4, 200
	rng := rand.New(rand.NewPCG(21, uint64(len(specs))))
	scripts := stepScripts(specs, vocab, maxSeq, rng)
	// The same thread count alone and together: the probabilities' sums go by thread
	// slices, as decode's do.
	alone := open(Options{MaxBatch: 1, MaxSeqLen: maxSeq, Threads: 2})
	want := make([][]stepOut, len(scripts))
	for i, sc := range scripts {
		want[i] = runScriptAlone(t, alone, sc, vocab)
	}

	b := open(Options{MaxBatch: maxBatch, MaxSeqLen: maxSeq, Threads: 2})
	type live struct{ script, slot, step int }
	var running []*live
	queue := rng.Perm(len(scripts))
	watch := watchIn(vocab)
	widest, mixed := 0, 0
	for call := 0; len(queue) > 0 || len(running) > 0; call++ {
		if len(queue) > 0 && len(running) < maxBatch && call%2 == 0 {
			free := slices.DeleteFunc([]int{0, 1, 2, 3}, func(s int) bool {
				return slices.ContainsFunc(running, func(l *live) bool { return l.slot == s })
			})
			l := &live{script: queue[0], slot: free[rng.IntN(len(free))]}
			queue = queue[1:]
			if err := startScript(b, scripts[l.script].seq, l.slot); err != nil {
				t.Fatal(err)
			}
			running = append(running, l)
		}
		rng.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
		part := running[:len(running)-rng.IntN(len(running))/2] // most of them, at least one
		slots := make([]engine.StepSlot, len(part))
		blocks := 0
		for i, l := range part {
			slots[i] = scripts[l.script].steps[l.step]
			slots[i].Slot = l.slot
			if slots[i].Block != nil {
				blocks++
			}
		}
		widest = max(widest, len(part))
		if blocks > 0 && blocks < len(part) {
			mixed++
		}
		rows, err := runStep(b, slots, 4, watch)
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		r := 0
		for _, l := range part {
			w := want[l.script][l.step]
			what := fmt.Sprintf("%s step %d (slot %d, %d of %d slots in call %d)", scripts[l.script].seq.name, l.step, l.slot, len(part), len(running), call)
			for i := range w.rows {
				if ok, where := sameStepRow(rows[r], w.rows[i]); !ok {
					t.Fatalf("%s row %d: %s", what, i, where)
				}
				if ok, where := sameLogitBits(b.Logits(r), w.logits[i]); !ok {
					t.Fatalf("%s row %d: logits differ from alone: %s", what, i, where)
				}
				r++
			}
			l.step++
		}
		if b.Logits(r) != nil {
			t.Fatalf("call %d: logits row %d exists after %d output rows", call, r, r)
		}
		running = slices.DeleteFunc(running, func(l *live) bool {
			if l.step < len(scripts[l.script].steps) {
				return false
			}
			if err := b.Release(l.slot); err != nil {
				t.Fatal(err)
			}
			return true
		})
	}
	if widest != maxBatch || mixed == 0 {
		t.Errorf("the calls had at most %d slots and %d mixed AR rows and blocks; want %d and some", widest, mixed, maxBatch)
	}
}

// TestStepRefusals: every call that breaks a limit fails with a message that says which,
// before anything changes: the slots' caches and positions (the same steps afterwards give
// the same bits as on an engine that never saw the refusals) and the last call's logits.
func TestStepRefusals(t *testing.T) {
	lockThread(t)
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	const maxSeq = 40
	o := Options{MaxBatch: 3, MaxSeqLen: maxSeq, Threads: 2}
	b, ref := openBackend(t, m, o), openBackend(t, m, o)
	text := []int32{151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198}
	ids := func(n int, first int32) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = first + int32(i)
		}
		return out
	}
	// both runs a step that must succeed on b and ref alike.
	both := func(what string, slots []engine.StepSlot) {
		t.Helper()
		rb, err := runStep(b, slots, 3, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		rr, err := runStep(ref, slots, 3, nil)
		if err != nil {
			t.Fatalf("%s on the reference engine: %v", what, err)
		}
		for i := range rb {
			if ok, where := sameStepRow(rb[i], rr[i]); !ok {
				t.Fatalf("%s row %d: %s", what, i, where)
			}
			if ok, where := sameLogitBits(b.Logits(i), ref.Logits(i)); !ok {
				t.Fatalf("%s row %d: logits: %s", what, i, where)
			}
		}
	}
	// refuse runs a step that must fail on b, leaving its logits as they were.
	refuse := func(what string, slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow, substr string) {
		t.Helper()
		before := b.Logits(0)
		if rows == nil {
			rows = engine.NewStepRows(engine.StepRows(slots), k, len(watch))
		}
		err := b.Step(slots, k, watch, rows)
		if err == nil || !strings.Contains(err.Error(), substr) {
			t.Errorf("%s: error %v, want one containing %q", what, err, substr)
		}
		if ok, where := sameLogitBits(b.Logits(0), before); !ok {
			t.Errorf("%s: the refused call changed the logits: %s", what, where)
		}
	}
	for _, e := range []*Backend{b, ref} {
		for slot := range 2 {
			if err := prefillCacheStep(e, slot, text); err != nil {
				t.Fatal(err)
			}
		}
	}
	ar := func(slot int, pending ...int32) engine.StepSlot { return engine.StepSlot{Slot: slot, Pending: pending} }
	blk := func(slot int, pending []int32, n int) engine.StepSlot {
		return engine.StepSlot{Slot: slot, Pending: pending, Block: ids(n, 300)}
	}
	both("slot 0's first step", []engine.StepSlot{ar(0, 100, 101)})

	refuse("no slots", nil, 3, nil, nil, "0 slots")
	refuse("more slots than max_batch", []engine.StepSlot{ar(0, 1), ar(1, 1), ar(2, 1), ar(0, 1)}, 3, nil, nil, "4 slots (1..3)")
	refuse("k 0", []engine.StepSlot{ar(0, 1)}, 0, nil, nil, "k 0 (1..8)")
	refuse("k 9", []engine.StepSlot{ar(0, 1)}, 9, nil, nil, "k 9 (1..8)")
	refuse("17 watched ids", []engine.StepSlot{ar(0, 1)}, 3, ids(17, 0), nil, "17 watched ids (at most 16)")
	refuse("too few output rows", []engine.StepSlot{blk(0, nil, 3)}, 3, nil, engine.NewStepRows(2, 3, 0), "2 output rows given, the slots make 3")
	refuse("slot out of range", []engine.StepSlot{ar(3, 1)}, 3, nil, nil, "slot 3 out of range 0..2")
	refuse("17 rows", []engine.StepSlot{blk(0, ids(10, 1), 7)}, 3, nil, nil, "10 pending and 7 block tokens")
	refuse("nothing to run", []engine.StepSlot{{Slot: 0}}, 3, nil, nil, "0 pending and 0 block tokens")
	refuse("one slot twice", []engine.StepSlot{ar(0, 1), blk(1, nil, 2), ar(0, 2)}, 3, nil, nil, "slot 0 appears in entries 0 and 2")
	// A free slot's step is its prefill (and may read a block after it); this one is
	// refused whole for its block's id.
	refuse("a free slot with a bad block", []engine.StepSlot{ar(0, 1), {Slot: 2, Pending: []int32{1}, Block: []int32{4, 152681}}}, 3, nil, nil,
		"entry 1: slot 2: block token 1 is id 152681")
	refuse("a pending id outside the vocabulary", []engine.StepSlot{ar(0, 5, 6), ar(1, 7, 152681)}, 3, nil, nil,
		"entry 1: slot 1: pending token 1 is id 152681, outside the vocabulary 0..152680")
	refuse("a negative block id", []engine.StepSlot{ar(0, 5), {Slot: 1, Block: []int32{4, -1}}}, 3, nil, nil,
		"entry 1: slot 1: block token 1 is id -1")
	refuse("a watched id outside the vocabulary", []engine.StepSlot{ar(0, 5)}, 3, []int32{3, 152681}, nil,
		"watched id 152681 (entry 1) is outside the vocabulary")

	// Fill slot 1 to the end of its cache: 9 + 16 + 14 = 39 of 40 positions.
	both("slot 1 + 16 pending", []engine.StepSlot{ar(1, ids(16, 500)...), blk(0, []int32{7}, 6)})
	both("slot 1 + 14 pending", []engine.StepSlot{blk(0, nil, 4), ar(1, ids(14, 600)...)})
	refuse("pending past max_seq_len", []engine.StepSlot{ar(0, 8), ar(1, 9, 10)}, 3, nil, nil,
		"entry 1: slot 1 holds 39 tokens; 2 pending would make 41, over max_seq_len 40")
	refuse("a block past max_seq_len", []engine.StepSlot{blk(0, []int32{9}, 2), blk(1, nil, 3)}, 3, nil, nil,
		"entry 1: slot 1: a block of 3 rows at positions 38..40 runs past max_seq_len 40")
	both("a block to the last position", []engine.StepSlot{blk(1, nil, 2), ar(0, 12)})
	both("the last pending token and a block of one", []engine.StepSlot{blk(1, []int32{13}, 1)})
	refuse("a full slot", []engine.StepSlot{ar(1, 14)}, 3, nil, nil, "slot 1 holds 40 tokens; 1 pending would make 41")
	both("a full slot's block of one", []engine.StepSlot{ar(0, 15), blk(1, nil, 1)})
	refuse("a full slot's block of two", []engine.StepSlot{blk(1, nil, 2)}, 3, nil, nil, "a block of 2 rows at positions 39..40")
	both("slot 0 after it all", []engine.StepSlot{blk(0, ids(3, 20), 6)})
	both("slot 0 and 1 after it all", []engine.StepSlot{ar(0, 30), blk(1, nil, 1)})
}
