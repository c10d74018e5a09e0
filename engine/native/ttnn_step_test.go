package native

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/checkpoint/golden"
)

// The ttnn backend's step (parallel box decoding, docs/hybrid-decoding.md) through the
// bridge, with the numpy stand-in adapter: its block rows against the PyTorch reference's
// hybrid goldens, its one-row steps against decode, and the bridge's checks of what an
// adapter returns.

// ttnnHybridDir holds the reference's hybrid goldens (tools/refmodel/gen_hybrid_goldens.py).
const ttnnHybridDir = "../../tools/refmodel/testdata/hybrid"

// ttnnHybridFile is the part of a hybrid golden file these tests read.
type ttnnHybridFile struct {
	TokenIDs struct {
		BoxStart  int32 `json:"box_start"`
		BoxEnd    int32 `json:"box_end"`
		RefStart  int32 `json:"ref_start"`
		None      int32 `json:"none"`
		Null      int32 `json:"null"`
		ImEnd     int32 `json:"im_end"`
		TextMask  int32 `json:"text_mask"`
		BlockSize int   `json:"block_size"`
	} `json:"token_ids"`
	Runs []ttnnHybridRun `json:"runs"`
}

type ttnnHybridRun struct {
	Case      string  `json:"case"`
	Mode      string  `json:"mode"`
	MaxNew    int     `json:"max_new"`
	PromptIDs []int32 `json:"prompt_ids"`
	Tokens    []int32 `json:"tokens"`
	Steps     []struct {
		Kind      string    `json:"kind"`
		Pending   int       `json:"pending"`
		Slot0     int       `json:"slot0"`
		Committed []int32   `json:"committed"`
		X0        []int32   `json:"x0"`
		X0P       []float32 `json:"x0_p"`
		Top       struct {
			IDs    [][]int32   `json:"ids"`
			Logits [][]float32 `json:"logits"`
		} `json:"top"`
		Box struct {
			PBoxStart float32 `json:"p_box_start"`
			PNone1    float32 `json:"p_none_1"`
			PBoxEnd2  float32 `json:"p_box_end_2"`
			PNull3    float32 `json:"p_null_3"`
			PNull4    float32 `json:"p_null_4"`
			EndScore  float32 `json:"end_score"`
		} `json:"box"`
		Ref struct {
			PRefStart float32 `json:"p_ref_start"`
		} `json:"ref"`
	} `json:"steps"`
}

func readTTNNHybrid(t *testing.T, ckpt string) *ttnnHybridFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(ttnnHybridDir, ckpt+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var f ttnnHybridFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s.json: %v", ckpt, err)
	}
	if len(f.Runs) == 0 || f.TokenIDs.BlockSize != 6 {
		t.Fatalf("%s.json: %d runs, block size %d", ckpt, len(f.Runs), f.TokenIDs.BlockSize)
	}
	return &f
}

// ttnnLogitTie is how close two of the reference's float32 logits may be for the engine
// to rank them the other way: the stand-in computes in float32 too, in another order.
const ttnnLogitTie = 1e-3

// ttnnCheckTopIDs compares an output row's ranking with the reference's top logits: equal
// rank by rank, except where the reference's two neighbours are within ttnnLogitTie.
func ttnnCheckTopIDs(t *testing.T, what string, got []int32, want []int32, logits []float32) {
	t.Helper()
	n := min(len(got), len(want))
	for j := range n {
		if got[j] == want[j] {
			continue
		}
		near := (j > 0 && logits[j-1]-logits[j] < ttnnLogitTie && got[j] == want[j-1]) ||
			(j+1 < len(want) && logits[j]-logits[j+1] < ttnnLogitTie && got[j] == want[j+1]) ||
			(j == len(want)-1) // the reference's next id is not recorded
		if !near {
			t.Errorf("%s: rank %d is id %d, the reference has %d (logits %v)\n got %v\nwant %v",
				what, j, got[j], want[j], logits, got, want)
			return
		}
		t.Logf("%s: rank %d is id %d, the reference's %d is within %g", what, j, got[j], want[j], ttnnLogitTie)
	}
}

// ttnnCloseProb says whether an engine probability matches the reference's, relatively
// (float32 softmax in another summation order) with an absolute floor for the tiny ones.
func ttnnCloseProb(got, want float32) bool {
	return math.Abs(float64(got)-float64(want)) <= 1e-4*math.Abs(float64(want))+1e-9
}

// TestTTNNStepMatchesHybridGoldens replays the reference's hybrid and fast runs on the
// random checkpoints through the ttnn backend: the prompt into the cache with no first
// token, then each recorded block step (the tokens the reference committed last as
// pending, the block after them). Every output row's top ids, argmax probability and the
// watched probabilities the acceptance rules read must be the reference's.
func TestTTNNStepMatchesHybridGoldens(t *testing.T) {
	lockThread(t)
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		t.Run(ckpt, func(t *testing.T) {
			dir := filepath.Join(checkpointsDir, ckpt)
			set, err := golden.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			hy := readTTNNHybrid(t, ckpt)
			m := openModel(t, dir)
			b := openTTNN(t, m, Options{MaxBatch: 2, MaxSeqLen: 256, BackendOptions: standinOptions(t)})
			for _, run := range hy.Runs {
				c := ttnnFindCase(t, set, run.Case)
				t.Run(fmt.Sprintf("%s/%s-%d", run.Case, run.Mode, run.MaxNew), func(t *testing.T) {
					ttnnReplayHybridRun(t, b, hy, &run, c)
				})
			}
		})
	}
}

func ttnnFindCase(t *testing.T, set *golden.Set, name string) *golden.Case {
	t.Helper()
	for i := range set.Cases {
		if set.Cases[i].Name == name {
			return &set.Cases[i]
		}
	}
	t.Fatalf("no golden case %s", name)
	return nil
}

func ttnnReplayHybridRun(t *testing.T, b *Backend, hy *ttnnHybridFile, run *ttnnHybridRun, c *golden.Case) {
	ids := hy.TokenIDs
	patches, prompt := caseInputs(t, c)
	if !slices.Equal(prompt, run.PromptIDs) {
		t.Fatalf("the golden case's prompt is not the hybrid run's")
	}
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
		t.Fatal(err)
	}
	const slot = 1 // not slot 0: nothing here may depend on it
	if err := prefillCacheStep(b, slot, prompt); err != nil {
		t.Fatal(err)
	}
	// What the acceptance rules read besides the top ids (docs/hybrid-decoding.md).
	watch := []int32{ids.BoxStart, ids.None, ids.BoxEnd, ids.Null, ids.ImEnd, ids.RefStart}
	const k = 5
	committed := slices.Clone(prompt)
	cached := len(prompt)
	var generated []int32
	for si, st := range run.Steps {
		if st.Kind != "block" {
			t.Fatalf("step %d is %s: the random checkpoints' goldens have block steps only", si, st.Kind)
		}
		pending := committed[cached:]
		if st.Pending != len(pending) && !(si == 0 && st.Pending == len(prompt)) {
			t.Fatalf("step %d: %d pending, the reference fed %d", si, len(pending), st.Pending)
		}
		if st.Slot0 != len(committed)-1 {
			t.Fatalf("step %d: slot 0 at %d, the reference's at %d", si, len(committed)-1, st.Slot0)
		}
		block := append([]int32{committed[len(committed)-1]}, slices.Repeat([]int32{ids.TextMask}, ids.BlockSize-1)...)
		rows := engine.NewStepRows(ids.BlockSize, k, len(watch))
		if err := b.Step([]engine.StepSlot{{Slot: slot, Pending: pending, Block: block}}, k, watch, rows); err != nil {
			t.Fatalf("step %d: %v", si, err)
		}
		for r, row := range rows {
			what := func(s string) string { return fmt.Sprintf("%s step %d row %d: %s", run.Case, si, r, s) }
			ttnnCheckTopIDs(t, what("top ids"), row.TopIDs, st.Top.IDs[r], st.Top.Logits[r])
			if row.TopIDs[0] != st.X0[r] && st.Top.Logits[r][0]-st.Top.Logits[r][1] >= ttnnLogitTie {
				t.Errorf("%s argmax %d, the reference's %d", what(""), row.TopIDs[0], st.X0[r])
			}
			if !ttnnCloseProb(row.TopProbs[0], st.X0P[r]) {
				t.Errorf("%s argmax probability %g, the reference's %g", what(""), row.TopProbs[0], st.X0P[r])
			}
		}
		w := func(r, j int) float32 { return rows[r].Watch[j] }
		for _, p := range []struct {
			name      string
			got, want float32
		}{
			{"p(<box>) row 0", w(0, 0), st.Box.PBoxStart},
			{"p(None) row 1", w(1, 1), st.Box.PNone1},
			{"p(</box>) row 2", w(2, 2), st.Box.PBoxEnd2},
			{"p(<null>) row 3", w(3, 3), st.Box.PNull3},
			{"p(<null>) row 4", w(4, 3), st.Box.PNull4},
			{"end score row 5", w(5, 2) + w(5, 3) + w(5, 4), st.Box.EndScore},
			{"p(<ref>) row 0", w(0, 5), st.Ref.PRefStart},
		} {
			if !ttnnCloseProb(p.got, p.want) {
				t.Errorf("%s step %d: %s %g, the reference's %g", run.Case, si, p.name, p.got, p.want)
			}
		}
		cached = len(committed) // the pending tokens are in the cache now, the block is not
		committed = append(committed, st.Committed...)
		generated = append(generated, st.Committed...)
	}
	if !slices.Equal(generated, run.Tokens) {
		t.Fatalf("the committed steps make %v, the run's tokens are %v", generated, run.Tokens)
	}
}

// TestTTNNStepOneRowIsADecode: a step without a block is a decode through the bridge
// (the same logits bit for bit, its argmax and probability), slots in one step come back
// in the caller's order, and the bridge counts only pending tokens as cached: a block's
// rows never take room in a slot.
func TestTTNNStepOneRowIsADecode(t *testing.T) {
	lockThread(t)
	dir := filepath.Join(checkpointsDir, "tiny-bf16")
	set, err := golden.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &set.Cases[0]
	patches, prompt := caseInputs(t, c)
	m := openModel(t, dir)
	maxSeq := len(prompt) + 12
	b := openTTNN(t, m, Options{MaxBatch: 2, MaxSeqLen: maxSeq, BackendOptions: standinOptions(t)})
	start := func(slot int) int32 {
		if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
			t.Fatal(err)
		}
		tok, _, err := prefillStep(b, slot, prompt)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tok := start(0)
	if start(1) != tok {
		t.Fatal("the same prompt gave two first tokens")
	}
	watch := []int32{tok, 5}
	var fed []int32 // what slot 1 was fed after its prompt
	for i := range 3 {
		rows := engine.NewStepRows(1, 8, len(watch))
		if err := b.Step([]engine.StepSlot{{Slot: 0, Pending: []int32{tok}}}, 8, watch, rows); err != nil {
			t.Fatal(err)
		}
		stepLogits := slices.Clone(b.Logits(0))
		next, prob := []int32{0}, []float32{0}
		if err := decodeStep(b, []int{1}, []int32{tok}, next, prob); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(stepLogits, b.Logits(0)) || len(stepLogits) == 0 {
			t.Fatalf("step %d: the step's logits are not the decode's", i)
		}
		if rows[0].TopIDs[0] != next[0] || math.Abs(float64(rows[0].TopProbs[0]-prob[0])) > 1e-6 {
			t.Fatalf("step %d: step's argmax %d (%g), decode's %d (%g)", i, rows[0].TopIDs[0], rows[0].TopProbs[0], next[0], prob[0])
		}
		checkProb(t, "top probability", rows[0].TopProbs[0], stepLogits, next[0])
		if want := softmaxProb(stepLogits, 5); math.Abs(float64(rows[0].Watch[1])-want) > 1e-6*want+1e-12 {
			t.Fatalf("step %d: watched probability %g, softmax gives %g", i, rows[0].Watch[1], want)
		}
		fed = append(fed, tok)
		tok = next[0]
	}

	// Both slots hold len(prompt)+3 positions. Slot 1 steps with a block after a pending
	// token while slot 0 takes one row: the rows come back slot 0's first, as asked.
	block := []int32{tok, 151676, 151676, 151676, 151676, 151676}
	slots := []engine.StepSlot{{Slot: 0, Pending: []int32{tok}}, {Slot: 1, Pending: []int32{tok}, Block: block}}
	rows := engine.NewStepRows(7, 4, 0)
	if err := b.Step(slots, 4, nil, rows); err != nil {
		t.Fatal(err)
	}
	alone := engine.NewStepRows(6, 4, 0)
	if err := b.Release(1); err != nil {
		t.Fatal(err)
	}
	start(1)
	if err := b.Step([]engine.StepSlot{{Slot: 1, Pending: append(fed, tok), Block: block}}, 4, nil, alone); err != nil {
		t.Fatal(err)
	}
	for r := range alone {
		if !slices.Equal(rows[1+r].TopIDs, alone[r].TopIDs) {
			t.Fatalf("block row %d: %v in a step with slot 0, %v alone", r, rows[1+r].TopIDs, alone[r].TopIDs)
		}
	}
	// Slot 0 holds len(prompt)+4 now: a block of 6 after 3 pending tokens reaches
	// position len(prompt)+11 (the last one there is), then 5 pending tokens fill it. Had
	// the bridge counted the block's rows, the second step would be refused.
	if err := b.Step([]engine.StepSlot{{Slot: 0, Pending: []int32{tok, tok, tok}, Block: block}}, 4, nil, alone); err != nil {
		t.Fatal(err)
	}
	one := engine.NewStepRows(1, 4, 0)
	if err := b.Step([]engine.StepSlot{{Slot: 0, Pending: []int32{tok, tok, tok, tok, tok}}}, 4, nil, one); err != nil {
		t.Fatal(err)
	}
	err = b.Step([]engine.StepSlot{{Slot: 0, Pending: []int32{tok}}}, 4, nil, one)
	wantError(t, err, fmt.Sprintf("native ttnn: step: slot 0 is full (%d positions, 1 pending, a block of 0, max_seq_len %d)", maxSeq, maxSeq))
}

// stepResultsAdapter answers step by the first pending token of its first slot: 0 is a
// good answer (ids 3 5 7 with 0.5 0.25 0.25, and the watched ids' probabilities from
// those), the others each a way of getting the protocol's result wrong. A prompt (more
// than one pending token) is answered well.
const stepResultsAdapter = `
def open(config): return {}
def vision(h, p, gh, gw): pass
def good(n, k, watch):
    probs = {3: 0.5, 5: 0.25, 7: 0.25}
    return [([3, 5, 7][:k], [0.5, 0.25, 0.25][:k], [probs.get(w, 0.0) for w in watch]) for _ in range(n)]
def step(h, slots, pending, blocks, no_output, k, watch):
    n = sum(0 if q else len(b) or 1 for b, q in zip(blocks, no_output))
    kind = pending[0][0] if len(pending[0]) == 1 else 0
    rows = good(n, k, watch)
    if kind == 1: return rows[1:]
    if kind == 2: return [(r[0], r[1]) for r in rows]
    if kind == 3: rows[1] = ([3, 152681, 7], rows[1][1], rows[1][2])
    if kind == 4: rows[0] = (rows[0][0], [0.5, float("nan"), 0.25], rows[0][2])
    if kind == 5: rows[0] = ([3, 5, 7], [0.25, 0.5, 0.25], rows[0][2])
    if kind == 6: rows[0] = ([3, 7, 5], rows[0][1], rows[0][2])
    if kind == 7: rows[0] = ([3, 5, 3], rows[0][1], rows[0][2])
    if kind == 8: rows[0] = (rows[0][0], rows[0][1], [0.4, 0.0])
    if kind == 9: rows[0] = (rows[0][0], rows[0][1], [0.5])
    if kind == 10: return None
    if kind == 11: raise RuntimeError("step failed on purpose")
    if kind == 12: rows[0] = (rows[0][0], rows[0][1], [0.5, 0.3])
    if kind == 13: rows[0] = (rows[0][0], rows[0][1], [0.5, 1.5])
    if kind == 14: rows[0] = (rows[0][0], ["x", 0.25, 0.25], rows[0][2])
    return rows
def release(h, slot): pass
def reset(h): pass
def close(h): pass
`

// ttnnStepOutputs are the C-side step outputs a Backend hands the backend, for checking
// that a failed call wrote nothing there.
func ttnnStepOutputs(sb *stepBuffers, rows, k, nWatch int) ([]int32, []float32, []float32) {
	return unsafe.Slice((*int32)(unsafe.Pointer(sb.topIDs)), rows*k),
		unsafe.Slice((*float32)(unsafe.Pointer(sb.topP)), rows*k),
		unsafe.Slice((*float32)(unsafe.Pointer(sb.watchP)), rows*nWatch)
}

// TestTTNNStepChecksTheAdaptersAnswer: the bridge refuses a step the ABI does not allow
// before the adapter sees it, and an answer that breaks the protocol after; either way
// nothing reaches the caller and no slot's length changes. A prefill without a first token
// is handled too.
func TestTTNNStepChecksTheAdaptersAnswer(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))
	dir := t.TempDir()
	for name, src := range map[string]string{"la_test_step_results": stepResultsAdapter} {
		if err := os.WriteFile(filepath.Join(dir, name+".py"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const maxSeq = 16
	b := openTTNN(t, m, Options{MaxBatch: 2, MaxSeqLen: maxSeq, BackendOptions: adapterOptions("la_test_step_results", dir)})
	// A prefill without a first token: a step of no output row.
	for slot := range 2 {
		if err := prefillCacheStep(b, slot, []int32{1, 2, 3, 4}); err != nil {
			t.Fatalf("prefill cache slot %d: %v", slot, err)
		}
	}
	const k = 3
	watch := []int32{3, 9}
	block := []int32{1, 2, 3}
	cIDs, cP, cW := ttnnStepOutputs(b.step, 4, k, len(watch))
	try := func(kind int32, blk []int32) error {
		for i := range cIDs {
			cIDs[i], cP[i] = -9, -9
		}
		for i := range cW {
			cW[i] = -9
		}
		slots := []engine.StepSlot{{Slot: 1, Pending: []int32{kind}, Block: blk}, {Slot: 0, Pending: []int32{0}}}
		rows := engine.NewStepRows(engine.StepRows(slots), k, len(watch))
		for _, r := range rows {
			r.TopIDs[0], r.TopProbs[0], r.Watch[0] = -5, -5, -5
		}
		err := b.Step(slots, k, watch, rows)
		if err != nil {
			for _, r := range rows {
				if r.TopIDs[0] != -5 || r.TopProbs[0] != -5 || r.Watch[0] != -5 {
					t.Fatalf("kind %d: a refused step wrote the caller's rows: %+v", kind, r)
				}
			}
			if slices.ContainsFunc(cIDs, func(v int32) bool { return v != -9 }) ||
				slices.ContainsFunc(cP, func(v float32) bool { return v != -9 }) ||
				slices.ContainsFunc(cW, func(v float32) bool { return v != -9 }) {
				t.Fatalf("kind %d: a refused step wrote the C outputs", kind)
			}
		}
		return err
	}
	for _, c := range []struct {
		kind int32
		want string
	}{
		{1, "adapter step: adapter returned 3 rows for 4 rows"},
		{2, "adapter step: (top_ids, top_probs, watch_probs) of row 0 has 2 items, want 3"},
		{3, "adapter step: adapter returned token 152681 for row 1, outside the vocabulary of 152681"},
		{4, "adapter step: adapter returned probability nan for row 0, want a number in [0, 1]"},
		{5, "adapter step: row 0 ranks id 5 (0.5) after id 3 (0.25): want the most probable first, equal ones in ascending id order"},
		{6, "adapter step: row 0 ranks id 5 (0.25) after id 7 (0.25)"},
		{7, "adapter step: row 0 names id 3 twice in its top 3"},
		{8, "adapter step: row 0 gives watched id 3 probability 0.4, which disagrees with its top 3"},
		{9, "adapter step: watched probabilities of row 0 has 1 items, want 2"},
		{10, "adapter step: adapter returned a NoneType of rows, want a list of 4"},
		{11, "adapter step: RuntimeError: step failed on purpose"},
		{12, "adapter step: row 0 gives watched id 9 probability 0.3, which disagrees with its top 3"},
		{13, "adapter step: adapter returned probability 1.5 for row 0"},
		{14, "adapter step: probability of row 0: TypeError"},
	} {
		wantError(t, try(c.kind, block), "native ttnn: step: "+c.want)
	}
	// Refused before the adapter: a watched id or a token outside the vocabulary, a free
	// slot, a slot twice, a block that would run past max_seq_len.
	rows := engine.NewStepRows(1, k, 1)
	for _, c := range []struct {
		slots []engine.StepSlot
		watch []int32
		want  string
	}{
		{[]engine.StepSlot{{Slot: 0, Pending: []int32{0}}}, []int32{152681}, "watched id 152681 outside the vocabulary of 152681"},
		{[]engine.StepSlot{{Slot: 0, Pending: []int32{-1}}}, []int32{3}, "token -1 of slot 0 outside the vocabulary"},
		{[]engine.StepSlot{{Slot: 0, Pending: []int32{0}}, {Slot: 0, Pending: []int32{0}}}, []int32{3}, "slot 0 appears twice"},
	} {
		r := engine.NewStepRows(engine.StepRows(c.slots), k, 1)
		wantError(t, b.Step(c.slots, k, c.watch, r), "native ttnn: step: "+c.want)
	}
	if err := b.Release(1); err != nil {
		t.Fatal(err)
	}
	wantError(t, b.Step([]engine.StepSlot{{Slot: 1, Block: []int32{0}}}, k, []int32{3}, rows),
		"step: slot 1: a free slot needs its prompt pending (a step on it is its prefill)")
	if err := prefillCacheStep(b, 1, []int32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	// Every refusal above left both slots at 4 positions: 4 + 12 pending fill slot 1, and
	// a block of 12 after 1 pending token in slot 0 reaches the last position (15), not
	// one of 13.
	wantError(t, b.Step([]engine.StepSlot{{Slot: 0, Pending: []int32{0}, Block: make([]int32, 13)}}, k, nil,
		engine.NewStepRows(13, k, 0)), "step: slot 0 is full (4 positions, 1 pending, a block of 13, max_seq_len 16)")
	slots := []engine.StepSlot{{Slot: 1, Pending: make([]int32, 12)}, {Slot: 0, Pending: []int32{0}, Block: make([]int32, 12)}}
	good := engine.NewStepRows(engine.StepRows(slots), k, len(watch))
	if err := b.Step(slots, k, watch, good); err != nil {
		t.Fatal(err)
	}
	for _, r := range good {
		if !slices.Equal(r.TopIDs, []int32{3, 5, 7}) || !slices.Equal(r.TopProbs, []float32{0.5, 0.25, 0.25}) ||
			!slices.Equal(r.Watch, []float32{0.5, 0}) {
			t.Fatalf("good row %+v", r)
		}
	}
	wantError(t, b.Step([]engine.StepSlot{{Slot: 1, Pending: []int32{0}}}, k, nil, engine.NewStepRows(1, k, 0)),
		"step: slot 1 is full (16 positions, 1 pending, a block of 0, max_seq_len 16)")
	if got := b.Logits(0); got != nil {
		t.Errorf("an adapter without logits() gave %d logits", len(got))
	}
}

// TestTTNNStepMatchesReferenceShapes replays scenes of the block-trained test model's
// hybrid goldens through the ttnn backend (the replay of step_reference_test.go): boxes
// read whole, abnormal coordinates, one-token steps among the blocks, pending runs of one
// to six tokens: the first 24 scenes (8 with -short; the CPU backend's test replays all 96).
func TestTTNNStepMatchesReferenceShapes(t *testing.T) {
	lockThread(t)
	g := readHybridGolden(t, "tiny-shapes-blocks")
	m := openModel(t, filepath.Join(hybridGoldens, "tiny-shapes-blocks"))
	b := openTTNN(t, m, Options{MaxBatch: 1, MaxSeqLen: 256, BackendOptions: standinOptions(t)})
	runs := g.Runs[:24]
	if testing.Short() {
		runs = runs[:8]
	}
	var st refStats
	for _, run := range runs {
		t.Run(run.Case, func(t *testing.T) {
			patches, gh, gw := shapesPatches(t, m.Config, run)
			replayRun(t, b, g.TokenIDs, run, patches, gh, gw, &st)
		})
	}
	t.Logf("%d scenes: %d block rows, %d AR steps; top-5 ranks %d exact, %d near ties; logits within %.2g, probabilities within %.2g relative",
		len(runs), st.blockRows, st.arSteps, st.exactTop, st.nearTies, st.maxLogitDiff, st.maxProbDiff)
	if st.blockRows < 20*len(runs) || st.arSteps == 0 || st.exactTop < 5*st.blockRows*9/10 {
		t.Errorf("compared %d block rows and %d AR steps, %d top-5 ranks exactly", st.blockRows, st.arSteps, st.exactTop)
	}
}

// TestTTNNStepMatchesCPUStep runs pairs of the block-trained model's scenes through the
// ttnn backend and the CPU backend in lockstep, both sequences of a pair in one Step
// (blocks and one-token rows mixed as the recorded steps fall), and wants the same rows
// from both: the same ranking where the CPU's logits are not within ttnnLogitTie, the
// same probabilities within 1e-4 relative.
func TestTTNNStepMatchesCPUStep(t *testing.T) {
	lockThread(t)
	g := readHybridGolden(t, "tiny-shapes-blocks")
	m := openModel(t, filepath.Join(hybridGoldens, "tiny-shapes-blocks"))
	cpu := openBackend(t, m, Options{MaxBatch: 2, MaxSeqLen: 256, Threads: 2})
	tt := openTTNN(t, m, Options{MaxBatch: 2, MaxSeqLen: 256, BackendOptions: standinOptions(t)})
	ids := g.TokenIDs
	watch := []int32{ids.BoxStart, ids.None, ids.BoxEnd, ids.Null, ids.ImEnd, ids.RefStart}
	n := 8
	if testing.Short() {
		n = 4
	}
	rows, steps := 0, 0
	for i := 0; i+1 < n; i += 2 {
		pair := g.Runs[i : i+2]
		type seq struct {
			run       hybridRun
			committed []int32
			cached    int
		}
		var seqs []*seq
		for slot, run := range pair {
			patches, gh, gw := shapesPatches(t, m.Config, run)
			for _, b := range []*Backend{cpu, tt} {
				if err := b.Release(slot); err != nil {
					t.Fatal(err)
				}
				if err := b.Vision(patches, gh, gw); err != nil {
					t.Fatal(err)
				}
				if err := prefillCacheStep(b, slot, run.PromptIDs); err != nil {
					t.Fatal(err)
				}
			}
			seqs = append(seqs, &seq{run: run, committed: append(slices.Clone(run.PromptIDs), run.Tokens...), cached: len(run.PromptIDs)})
		}
		for si := 0; ; si++ {
			var slots []engine.StepSlot
			for slot, s := range seqs {
				if si >= len(s.run.Steps) {
					continue
				}
				st := s.run.Steps[si]
				ss := engine.StepSlot{Slot: slot}
				if si > 0 {
					ss.Pending = s.committed[s.cached : s.cached+st.Pending]
					s.cached += st.Pending
				}
				if st.Kind == "block" {
					ss.Block = append([]int32{s.committed[s.cached-1]}, slices.Repeat([]int32{ids.TextMask}, ids.BlockSize-1)...)
				}
				slots = append(slots, ss)
			}
			if len(slots) == 0 {
				break
			}
			want := engine.NewStepRows(engine.StepRows(slots), 5, len(watch))
			got := engine.NewStepRows(len(want), 5, len(watch))
			if err := cpu.Step(slots, 5, watch, want); err != nil {
				t.Fatal(err)
			}
			if err := tt.Step(slots, 5, watch, got); err != nil {
				t.Fatal(err)
			}
			for r := range want {
				what := fmt.Sprintf("scenes %s+%s step %d row %d", pair[0].Case, pair[1].Case, si, r)
				logits := cpu.Logits(r)
				for j, id := range got[r].TopIDs {
					if w := want[r].TopIDs[j]; id != w && math.Abs(float64(logits[id]-logits[w])) >= ttnnLogitTie {
						t.Fatalf("%s: rank %d is %d on ttnn, %d on cpu (logits %g, %g)", what, j, id, w, logits[id], logits[w])
					}
				}
				for j, p := range append(slices.Clone(got[r].TopProbs), got[r].Watch...) {
					w := append(slices.Clone(want[r].TopProbs), want[r].Watch...)[j]
					if d := math.Abs(float64(p - w)); d > 1e-4*float64(w)+1e-7 {
						t.Fatalf("%s: probability %d is %g on ttnn, %g on cpu", what, j, p, w)
					}
				}
			}
			rows += len(want)
			steps++
		}
	}
	t.Logf("%d scenes in pairs: %d steps, %d rows the same on both backends", n, steps, rows)
}

// cannedStepAdapter answers every step with the same rows, computing nothing: what is left
// to time is the bridge (argument lists, the GIL, checking every row).
const cannedStepAdapter = `
def open(config): return {}
def vision(h, p, gh, gw): pass
def step(h, slots, pending, blocks, no_output, k, watch):
    row = (list(range(k)), [0.5] + [0.5 / k] * (k - 1), [0.0] * len(watch))
    return [row] * sum(0 if q else len(b) or 1 for b, q in zip(blocks, no_output))
def release(h, slot): pass
def reset(h): pass
def close(h): pass
`

// BenchmarkTTNNBridgeStepCall is the bridge's cost of one hybrid step into an adapter that
// computes nothing: slots of six pending tokens and a block of six, k 5, six watched ids
// (what the pipeline asks), for 1 and 8 slots.
func BenchmarkTTNNBridgeStepCall(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "la_bench_step.py"), []byte(cannedStepAdapter), 0o644); err != nil {
		b.Fatal(err)
	}
	m := openModel(b, tinyCheckpoint{dtype: checkpoint.F32}.write(b))
	watch := []int32{10, 11, 12, 13, 14, 15}
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("slots=%d", n), func(b *testing.B) {
			be := openTTNN(b, m, Options{MaxBatch: n, MaxSeqLen: 1 << 30, BackendOptions: adapterOptions("la_bench_step", dir)})
			var slots []engine.StepSlot
			for i := range n {
				if err := prefillCacheStep(be, i, []int32{1}); err != nil {
					b.Fatal(err)
				}
				slots = append(slots, engine.StepSlot{Slot: i, Pending: make([]int32, 6), Block: make([]int32, 6)})
			}
			rows := engine.NewStepRows(engine.StepRows(slots), 5, len(watch))
			b.ResetTimer()
			for b.Loop() {
				if err := be.Step(slots, 5, watch, rows); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTTNNStepPrefillsAFreeSlot: a step on a free slot is its prefill (ABI 4), image
// embeddings spliced in: its row is the prefill's, bit for bit, and with NoOutput it
// caches the prompt without a row, leaving the same cache for the next step.
func TestTTNNStepPrefillsAFreeSlot(t *testing.T) {
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))
	b := openTTNN(t, m, Options{MaxBatch: 3, MaxSeqLen: 64, BackendOptions: standinOptions(t)})
	prompt := []int32{151644, 872, 198, 151666, 151665, 151665, 151667, 151645, 198} // 2 image ids: a 2x4 grid
	vision := func() {
		t.Helper()
		if err := b.Vision(testPatches(2, 4, 3), 2, 4); err != nil {
			t.Fatal(err)
		}
	}
	vision()
	tok, prob, err := prefillStep(b, 0, prompt)
	if err != nil {
		t.Fatal(err)
	}
	want := b.Logits(0)
	vision()
	rows := engine.NewStepRows(1, 2, 1)
	if err := b.Step([]engine.StepSlot{{Slot: 1, Pending: prompt}}, 2, []int32{tok}, rows); err != nil {
		t.Fatal(err)
	}
	if rows[0].TopIDs[0] != tok || rows[0].TopProbs[0] != prob || rows[0].Watch[0] != prob {
		t.Fatalf("step on a free slot: %+v; the prefill's token %d, probability %g", rows[0], tok, prob)
	}
	if !slices.Equal(b.Logits(0), want) {
		t.Fatal("the step's logits are not the prefill's")
	}
	vision()
	if err := b.Step([]engine.StepSlot{{Slot: 2, Pending: prompt, NoOutput: true}}, 1, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.Logits(0); got != nil {
		t.Fatalf("a step without output rows left %d logits", len(got))
	}
	next := make([]int32, 3)
	if err := decodeStep(b, []int{0, 1, 2}, []int32{tok, tok, tok}, next, nil); err != nil {
		t.Fatal(err)
	}
	if next[1] != next[0] || next[2] != next[0] {
		t.Fatalf("next tokens after the same prompt: %v", next)
	}
	// The image was consumed by the prompt that took it: another one is refused.
	if err := b.Release(2); err != nil {
		t.Fatal(err)
	}
	err = b.Step([]engine.StepSlot{{Slot: 2, Pending: prompt}}, 1, nil, engine.NewStepRows(1, 1, 0))
	wantError(t, err, "ValueError: prompt has 2 image tokens but 0 image embeddings are kept")
}
