package sim_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/sim"
)

// The simulated chip in hybrid mode, read by the real acceptance rules (engine/blockdecode)
// with the ids of the bundled checkpoint's config.json.

// blockIDs are the bundled model's hybrid ids, from its config.json.
func blockIDs(t *testing.T) *blockdecode.Tokens {
	t.Helper()
	cfg, err := checkpoint.LoadConfig(bundledModel)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.HybridError(); err != nil {
		t.Fatal(err)
	}
	return &blockdecode.Tokens{
		BoxStart: int32(cfg.BoxStartTokenID), BoxEnd: int32(cfg.BoxEndTokenID),
		RefStart: int32(cfg.RefStartTokenID), RefEnd: int32(cfg.RefEndTokenID),
		CoordStart: int32(cfg.CoordStartTokenID), CoordEnd: int32(cfg.CoordEndTokenID),
		None: int32(cfg.NoneTokenID), Null: int32(cfg.NullTokenID), IMEnd: int32(cfg.Text.EOSTokenID),
		TextMask: int32(cfg.TextMaskTokenID),
	}
}

// hybridSeq is one sequence decoded in hybrid mode, as the pipeline's loop does it.
type hybridSeq struct {
	slot     int
	last     int32   // the last committed token (the prompt's last before any)
	tokens   []int32 // generated
	probs    []float32
	pending  int  // tokens committed by the last step, not yet in the cache
	oneToken bool // finishing a box one token at a time
	done     bool
	types    []blockdecode.Type
}

// startHybrid runs vision and a prefill without a first token for r in slot.
func (f *fixture) startHybrid(t *testing.T, r request, slot int) *hybridSeq {
	t.Helper()
	if err := f.b.Vision(r.patches, r.gridH, r.gridW); err != nil {
		t.Fatal(err)
	}
	if err := prefillCacheStep(f.b, slot, r.ids); err != nil {
		t.Fatal(err)
	}
	return &hybridSeq{slot: slot, last: r.ids[len(r.ids)-1]}
}

// stepHybrid runs one Step for seqs (in that order) and commits what the rules decide.
func (f *fixture) stepHybrid(t *testing.T, ids *blockdecode.Tokens, seqs []*hybridSeq, limit int) {
	t.Helper()
	var slots []engine.StepSlot
	for _, s := range seqs {
		ss := engine.StepSlot{Slot: s.slot, Pending: s.tokens[len(s.tokens)-s.pending:]}
		if !s.oneToken {
			ss.Block = append([]int32{s.last}, slices.Repeat([]int32{ids.TextMask}, blockdecode.Size-1)...)
		}
		slots = append(slots, ss)
	}
	watch := ids.Watch()
	rows := engine.NewStepRows(engine.StepRows(slots), blockdecode.K, len(watch))
	if err := f.b.Step(slots, blockdecode.K, watch, rows); err != nil {
		t.Fatal(err)
	}
	for _, s := range seqs {
		var d blockdecode.Decision
		var err error
		left := limit - len(s.tokens)
		if s.oneToken {
			d, err = blockdecode.AR(rows[0], ids, blockdecode.Hybrid, left)
			rows = rows[1:]
		} else {
			d, err = blockdecode.Block(rows[:blockdecode.Size], ids, blockdecode.Hybrid, left)
			rows = rows[blockdecode.Size:]
		}
		if err != nil {
			t.Fatal(err)
		}
		s.tokens, s.probs = append(s.tokens, d.Commit...), append(s.probs, d.Probs...)
		s.last, s.pending = d.Commit[len(d.Commit)-1], len(d.Commit)
		s.types = append(s.types, d.Type)
		s.oneToken = (s.oneToken || d.ToAR) && !d.ToBlocks
		s.done = d.Stop || len(s.tokens) >= limit
	}
}

// hybridAlone runs r alone in slot 0 in hybrid mode until it stops.
func (f *fixture) hybridAlone(t *testing.T, ids *blockdecode.Tokens, r request, limit int) *hybridSeq {
	t.Helper()
	s := f.startHybrid(t, r, 0)
	for !s.done {
		f.stepHybrid(t, ids, []*hybridSeq{s}, limit)
	}
	if err := f.b.Release(0); err != nil {
		t.Fatal(err)
	}
	return s
}

// blocksFor is the number of blocks an answer takes when each unit (a label, a box, a
// point, the end) is read in one, a label longer than a block continuing in the next
// (docs/hybrid-decoding.md, "Training layout").
func blocksFor(answer []int32, ids *blockdecode.Tokens) int {
	n, unit := 0, 0
	for _, tok := range answer {
		unit++
		if tok == ids.RefEnd || tok == ids.BoxEnd || tok == ids.IMEnd {
			n += (unit + blockdecode.Size - 1) / blockdecode.Size
			unit = 0
		}
	}
	return n
}

func count[T comparable](xs []T, x T) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// TestHybridAnswersAreTheARAnswer: read by the real acceptance rules, the simulated
// model's blocks give exactly its AR answer and the same token probabilities (so the same
// scores), in fewer steps: every label, box and point in one block, the end in one, a
// doubtful box cut and finished one token at a time.
func TestHybridAnswersAreTheARAnswer(t *testing.T) {
	f := newFixture(t, zeroCosts, 1)
	ids := blockIDs(t)
	seen := map[blockdecode.Type]int{}
	var arSteps, hybridSteps int
	for seed := range uint64(24) {
		task, query := engine.TaskDetect, "person</c>a red car</c>dog"
		switch seed % 4 {
		case 1:
			task, query = engine.TaskPoint, "the tallest giraffe in the picture"
		case 2:
			task, query = engine.TaskGroundOne, "cat"
		}
		r := f.newRequest(t, seed, task, query)
		want, wantProbs := f.aloneWithProbs(t, r, 400)
		got := f.hybridAlone(t, ids, r, 400)
		if !slices.Equal(got.tokens, want) || !slices.Equal(got.probs, wantProbs) {
			t.Fatalf("seed %d: hybrid\n%q\n%v\nAR\n%q\n%v", seed, f.tok.Decode(got.tokens), got.probs, f.tok.Decode(want), wantProbs)
		}
		for _, ty := range got.types {
			seen[ty]++
		}
		if got.types[len(got.types)-1] != blockdecode.TypeIMEnd {
			t.Errorf("seed %d: the last step is %s, want the end block", seed, got.types[len(got.types)-1])
		}
		// Each unit in one block (a label longer than a block in as many as it takes): a
		// label, a box or a point; the end.
		units := blocksFor(want, ids)
		fallbacks := count(got.types, blockdecode.TypeErrorBox)
		if blocks := len(got.types) - count(got.types, blockdecode.TypeCoordAR) - count(got.types, blockdecode.TypeBoxEndAR); blocks != units {
			t.Errorf("seed %d: %d block steps for %d units", seed, blocks, units)
		}
		if count(got.types, blockdecode.TypeBoxEndAR) != fallbacks {
			t.Errorf("seed %d: %d boxes fell back, %d were finished one token at a time", seed, fallbacks, count(got.types, blockdecode.TypeBoxEndAR))
		}
		arSteps += len(want)
		hybridSteps += len(got.types)
	}
	for _, ty := range []blockdecode.Type{blockdecode.TypeRefObject, blockdecode.TypeCoordBox, blockdecode.TypePointBox,
		blockdecode.TypeIMEnd, blockdecode.TypeErrorBox, blockdecode.TypeCoordAR, blockdecode.TypeBoxEndAR} {
		if seen[ty] == 0 {
			t.Errorf("no %s step in 24 requests: %v", ty, seen)
		}
	}
	boxes := seen[blockdecode.TypeCoordBox] + seen[blockdecode.TypeErrorBox]
	if frac := float64(seen[blockdecode.TypeErrorBox]) / float64(boxes); frac < 0.04 || frac > 0.3 {
		t.Errorf("%d of %d box blocks fell back (%.2f), want about 1 in 8", seen[blockdecode.TypeErrorBox], boxes, frac)
	}
	if hybridSteps*3 > arSteps {
		t.Errorf("%d hybrid steps for %d tokens: not a third of AR's", hybridSteps, arSteps)
	}
	t.Logf("%d tokens: %d AR steps, %d hybrid steps; %v", arSteps, arSteps, hybridSteps, seen)
}

// TestHybridRowsReadAsMeant: what the rules read in the simulated rows, unit by unit: a
// label by the label reading, a box by the box reading, each row's top ids ranked with
// ties in id order, and a row whose target is no coordinate holding no coordinate in its
// top ids (so an end or label block is never read as a box).
func TestHybridRowsReadAsMeant(t *testing.T) {
	f := newFixture(t, zeroCosts, 1)
	ids := blockIDs(t)
	r := f.newRequest(t, 3, engine.TaskDetect, "person</c>car")
	s := f.startHybrid(t, r, 0)
	paths := map[blockdecode.Type]blockdecode.Path{}
	for !s.done {
		var slots []engine.StepSlot
		ss := engine.StepSlot{Slot: 0, Pending: s.tokens[len(s.tokens)-s.pending:]}
		if !s.oneToken {
			ss.Block = append([]int32{s.last}, slices.Repeat([]int32{ids.TextMask}, 5)...)
		}
		slots = append(slots, ss)
		watch := ids.Watch()
		rows := engine.NewStepRows(engine.StepRows(slots), 8, len(watch))
		if err := f.b.Step(slots, 8, watch, rows); err != nil {
			t.Fatal(err)
		}
		for i, row := range rows {
			sum := float32(0)
			for j, id := range row.TopIDs {
				sum += row.TopProbs[j]
				if j > 0 && (row.TopProbs[j] > row.TopProbs[j-1] || row.TopProbs[j] == row.TopProbs[j-1] && id < row.TopIDs[j-1]) {
					t.Fatalf("row %d is not ranked: %v %v", i, row.TopIDs, row.TopProbs)
				}
				if !ids.IsCoord(row.TopIDs[0]) && ids.IsCoord(id) {
					t.Fatalf("row %d predicts %d but has coordinate %d in its top ids", i, row.TopIDs[0], id)
				}
			}
			if sum < 0.999 || sum > 1.001 {
				t.Fatalf("row %d: its top ids hold %g of the mass", i, sum)
			}
			for j, w := range watch {
				if want := ids.Prob(engine.StepRow{TopIDs: row.TopIDs, TopProbs: row.TopProbs}, w); want != row.Watch[j] {
					t.Fatalf("row %d: watched id %d has %g, its top ids say %g", i, w, row.Watch[j], want)
				}
			}
		}
		// Replay the step's decision (the rows are the same again: nothing was cached).
		before := len(s.tokens)
		if s.oneToken {
			d, _ := blockdecode.AR(engine.StepRow{TopIDs: rows[0].TopIDs[:5], TopProbs: rows[0].TopProbs[:5], Watch: rows[0].Watch}, ids, blockdecode.Hybrid, 400)
			s.tokens, s.last, s.pending = append(s.tokens, d.Commit...), d.Commit[0], 1
			s.oneToken, s.done = !d.ToBlocks, d.Stop
			continue
		}
		five := make([]engine.StepRow, len(rows))
		for i, row := range rows {
			five[i] = engine.StepRow{TopIDs: row.TopIDs[:5], TopProbs: row.TopProbs[:5], Watch: row.Watch}
		}
		d, err := blockdecode.Block(five, ids, blockdecode.Hybrid, 400)
		if err != nil {
			t.Fatal(err)
		}
		paths[d.Type] = d.Reading.Path
		s.tokens = append(s.tokens, d.Commit...)
		s.last, s.pending, s.oneToken, s.done = d.Commit[len(d.Commit)-1], len(s.tokens)-before, d.ToAR, d.Stop
	}
	if paths[blockdecode.TypeRefObject] != blockdecode.PathRef && paths[blockdecode.TypeRefObject] != blockdecode.PathArgmax {
		t.Errorf("labels read by %q", paths[blockdecode.TypeRefObject])
	}
	if p, ok := paths[blockdecode.TypeCoordBox]; ok && p != blockdecode.PathBox {
		t.Errorf("boxes read by %q, want the box reading", p)
	}
	if paths[blockdecode.TypeIMEnd] != blockdecode.PathArgmax {
		t.Errorf("the end read by %q, want the argmaxes", paths[blockdecode.TypeIMEnd])
	}
}

// TestHybridBatchingNeverChangesTokens: hybrid sequences started at different steps and
// stepped together in shuffled orders, slots reused, give each its tokens alone.
func TestHybridBatchingNeverChangesTokens(t *testing.T) {
	f := newFixture(t, zeroCosts, 3)
	ids := blockIDs(t)
	queries := []string{"person</c>car", "dog</c>cat</c>bird", "a very long label that spans more than one block of six tokens", "tree", "boat</c>bus"}
	var reqs []request
	var want [][]int32
	for i, q := range queries {
		r := f.newRequest(t, uint64(10+i), engine.TaskDetect, q)
		reqs = append(reqs, r)
		want = append(want, f.hybridAlone(t, ids, r, 400).tokens)
	}
	got := make([][]int32, len(reqs))
	m0 := f.meter.Read()
	var running []*hybridSeq
	which := map[*hybridSeq]int{}
	free := []int{2, 0, 1}
	next, step := 0, 0
	for next < len(reqs) || len(running) > 0 {
		if next < len(reqs) && len(free) > 0 {
			s := f.startHybrid(t, reqs[next], free[0])
			free = free[1:]
			which[s] = next
			running = append(running, s)
			next++
		}
		order := slices.Clone(running)
		if step%3 == 1 {
			slices.Reverse(order)
		}
		f.stepHybrid(t, ids, order, 400)
		step++
		var kept []*hybridSeq
		for _, s := range running {
			if !s.done {
				kept = append(kept, s)
				continue
			}
			got[which[s]] = s.tokens
			if err := f.b.Release(s.slot); err != nil {
				t.Fatal(err)
			}
			free = append(free, s.slot)
		}
		running = kept
	}
	for i := range reqs {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%q batched:\n%q\nalone:\n%q", queries[i], f.tok.Decode(got[i]), f.tok.Decode(want[i]))
		}
	}
	if m := f.meter.Read().Sub(m0); m.BlockSteps == 0 || float64(m.Rows)/float64(m.Steps) <= 1.5 {
		t.Errorf("%d steps advancing %d sequences: the test did not batch", m.Steps, m.Rows)
	}
	if strings.Count(f.tok.Decode(want[2]), "<ref>") != 1 {
		t.Errorf("the long label's answer: %q", f.tok.Decode(want[2]))
	}
}

// TestHybridStepCost: a Step costs one forward of all its rows, at least the chip's batch,
// like a decode step; the meter counts it as a step, a block step and its rows.
func TestHybridStepCost(t *testing.T) {
	costs := sim.Costs{Decode: 20 * time.Millisecond, BatchAlpha: 0.25, Speed: 20}
	for _, c := range []struct{ rows, batch int }{{1, 1}, {12, 1}, {3, 4}, {4, 4}, {14, 4}} {
		want := time.Duration(float64(20*time.Millisecond) * (1 + 0.25*float64(max(c.rows, c.batch)-1)) / 20)
		if got := costs.HybridStepCost(c.rows, c.batch); got != want {
			t.Errorf("%d rows on a chip of %d: %s, want %s", c.rows, c.batch, got, want)
		}
	}
	if costs.HybridStepCost(2, 4) != costs.StepCost(4) {
		t.Error("one-token steps of a batch should cost a decode step of the batch")
	}

	f := newFixture(t, costs, 2)
	ids := blockIDs(t)
	a := f.startHybrid(t, f.newRequest(t, 1, engine.TaskDetect, "person"), 0)
	b := f.startHybrid(t, f.newRequest(t, 2, engine.TaskDetect, "car"), 1)
	m0 := f.meter.Read()
	f.stepHybrid(t, ids, []*hybridSeq{a, b}, 400) // two blocks, nothing pending: 12 rows
	rows2 := a.pending + 6                        // what the first step committed, and a block
	f.stepHybrid(t, ids, []*hybridSeq{a}, 400)
	m := f.meter.Read().Sub(m0)
	want := costs.HybridStepCost(12, 2) + costs.HybridStepCost(rows2, 2)
	if m.Busy != want || m.Steps != 2 || m.Rows != 3 || m.BlockSteps != 2 || m.StepRows != int64(12+rows2) || m.Sequences != 0 {
		t.Errorf("meter %+v, want busy %s, 2 steps of 3 sequences, 2 block steps of %d rows", m, want, 12+rows2)
	}
}

// TestHybridMisuseFailsLikeTheChip: the calls a backend refuses, and tokens the slot's
// answer does not hold, are errors that change nothing.
func TestHybridMisuseFailsLikeTheChip(t *testing.T) {
	f := newFixture(t, zeroCosts, 2)
	ids := blockIDs(t)
	r := f.newRequest(t, 5, engine.TaskDetect, "person")
	s := f.startHybrid(t, r, 0)
	block := append([]int32{s.last}, slices.Repeat([]int32{ids.TextMask}, 5)...)
	watch := ids.Watch()
	try := func(slots []engine.StepSlot, k int) error {
		return f.b.Step(slots, k, watch, engine.NewStepRows(engine.StepRows(slots), k, len(watch)))
	}
	for _, c := range []struct {
		slots []engine.StepSlot
		k     int
		want  string
	}{
		{[]engine.StepSlot{{Slot: 1, Block: block}}, 5, "slot 1 is free: its prefill takes no block"},
		{[]engine.StepSlot{{Slot: 0, Block: block}, {Slot: 0, Block: block}}, 5, "slot 0 appears twice"},
		{[]engine.StepSlot{{Slot: 0, Pending: []int32{7}, Block: block}}, 5, "slot 0 was fed [7], but its answer goes on"},
		{[]engine.StepSlot{{Slot: 0, Block: append([]int32{9}, block[1:]...)}}, 5, "block starts with 9, not the last committed token"},
		{[]engine.StepSlot{{Slot: 0}}, 5, "a row without a block needs a pending token"},
		{[]engine.StepSlot{{Slot: 0, Block: block}}, 9, "k 9 (1..8)"},
		{[]engine.StepSlot{{Slot: 2, Block: block}}, 5, "slot 2 out of range"},
	} {
		if err := try(c.slots, c.k); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.slots, err, c.want)
		}
	}
	if err := f.b.Step([]engine.StepSlot{{Slot: 0, Block: block}}, 5, watch, engine.NewStepRows(5, 5, len(watch))); err == nil ||
		!strings.Contains(err.Error(), "5 output rows given, the slots make 6") {
		t.Errorf("short rows: %v", err)
	}
	if err := decodeStep(f.b, []int{0}, []int32{s.last}, []int32{0}, nil); err == nil || !strings.Contains(err.Error(), "was fed") {
		t.Errorf("an AR step fed the prompt's last token again: %v", err)
	}
	// Nothing changed: the request still decodes to its answer.
	f.stepHybrid(t, ids, []*hybridSeq{s}, 400)
	for !s.done {
		f.stepHybrid(t, ids, []*hybridSeq{s}, 400)
	}
	if err := f.b.Release(0); err != nil {
		t.Fatal(err)
	}
	if want := f.alone(t, r, 400); !slices.Equal(s.tokens, want) {
		t.Errorf("after refused steps:\n%q\nwant\n%q", f.tok.Decode(s.tokens), f.tok.Decode(want))
	}
}

// TestHybridIsDeterministic: the same request gives the same steps (which boxes fall back
// included) on another simulated chip; another image gives another answer.
func TestHybridIsDeterministic(t *testing.T) {
	ids := blockIDs(t)
	run := func(seed uint64) *hybridSeq {
		f := newFixture(t, zeroCosts, 1)
		return f.hybridAlone(t, ids, f.newRequest(t, seed, engine.TaskDetect, "person</c>car</c>dog</c>cat"), 400)
	}
	a, b := run(7), run(7)
	if !slices.Equal(a.tokens, b.tokens) || !slices.Equal(a.probs, b.probs) || !slices.Equal(a.types, b.types) {
		t.Fatalf("the same request twice:\n%v %v\n%v %v", a.tokens, a.types, b.tokens, b.types)
	}
	if c := run(8); slices.Equal(a.tokens, c.tokens) {
		t.Fatal("another image gave the same answer")
	}
}
