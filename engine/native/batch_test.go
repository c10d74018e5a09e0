package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
)

// The rule these tests hold the CPU backend to: batching never changes a sequence. A
// slot's tokens and logits (bit for bit) are the same decoded alone or together with
// others, whatever the others hold, in any row order, in any slot.

// batchSeq is one request of the batching tests.
type batchSeq struct {
	name    string
	patches []float32 // nil: a text-only prompt, no vision call
	gh, gw  int
	ids     []int32
	steps   int     // decode steps after the first token
	want    []int32 // the reference's greedy ids (goldens), when known
}

// batchTrace is what a sequence produced alone: its tokens and the logits of every step
// (the prefill's first).
type batchTrace struct {
	tokens []int32
	logits [][]float32
}

// batchSpecs are the sequences of a checkpoint: its golden cases (16 greedy ids from the
// PyTorch reference) and a few more of other lengths, grids and prompts, one without an
// image.
func batchSpecs(t *testing.T, ckpt string) []batchSeq {
	t.Helper()
	dir, idx := readGoldens(t, ckpt)
	var specs []batchSeq
	for _, c := range idx.Cases {
		specs = append(specs, batchSeq{
			name: c.Name, patches: readF32(t, dir, c.Files["patches"]), gh: c.GridH, gw: c.GridW,
			ids: readI32(t, dir, c.Files["prompt_ids"]), steps: len(c.GreedyIDs) - 1, want: c.GreedyIDs,
		})
	}
	for i, g := range [][2]int{{4, 8}, {6, 4}, {4, 4}} {
		specs = append(specs, batchSeq{
			name: fmt.Sprintf("synthetic-%dx%d", g[0], g[1]), patches: testPatches(g[0], g[1], uint64(10+i)),
			gh: g[0], gw: g[1], ids: testPrompt(g[0] * g[1] / 4), steps: 3 + 4*i,
		})
	}
	text := []int32{151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198}
	specs = append(specs, batchSeq{name: "text-only", ids: text, steps: 9})
	return specs
}

// prefillErr keeps the error of a Prefill call.
func prefillErr(_ int32, _ float32, err error) error { return err }

// startBatchSeq runs a sequence's vision (if it has an image) and prefill into slot.
func startBatchSeq(b *Backend, s batchSeq, slot int, wantProb bool) (int32, float32, error) {
	if s.patches != nil {
		if err := b.Vision(s.patches, s.gh, s.gw); err != nil {
			return 0, 0, fmt.Errorf("%s: vision: %w", s.name, err)
		}
	}
	tok, prob, err := prefillStep(b, slot, s.ids)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: prefill into slot %d: %w", s.name, slot, err)
	}
	return tok, prob, nil
}

// runSeqAlone runs a sequence by itself in slot 0 and releases the slot.
func runSeqAlone(t *testing.T, b *Backend, s batchSeq) batchTrace {
	t.Helper()
	tok, _, err := startBatchSeq(b, s, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	tr := batchTrace{tokens: []int32{tok}, logits: [][]float32{b.Logits(0)}}
	next := []int32{0}
	for range s.steps {
		if err := decodeStep(b, []int{0}, []int32{tok}, next, nil); err != nil {
			t.Fatalf("%s alone: decode: %v", s.name, err)
		}
		tok = next[0]
		tr.tokens = append(tr.tokens, tok)
		tr.logits = append(tr.logits, b.Logits(0))
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	return tr
}

// sameLogitBits reports whether two logits rows are identical bit for bit, and where not.
func sameLogitBits(a, b []float32) (bool, string) {
	if len(a) != len(b) {
		return false, fmt.Sprintf("%d floats against %d", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false, fmt.Sprintf("[%d] = %g, alone %g", i, a[i], b[i])
		}
	}
	return true, ""
}

// softmaxAt is softmax(logits)[tok] in float64.
func softmaxAt(logits []float32, tok int32) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return math.Exp(float64(logits[tok])-mx) / sum
}

// checkTokenProb holds a returned probability to softmax(row)[tok] within 1e-5 relative.
func checkTokenProb(t *testing.T, what string, prob float32, logits []float32, tok int32) {
	t.Helper()
	want := softmaxAt(logits, tok)
	if d := math.Abs(float64(prob)-want) / want; !(d <= 1e-5) {
		t.Errorf("%s: probability %g, softmax of the logits gives %g (%.2g relative)", what, prob, want, d)
	}
}

// schedSeq is a sequence in the batched schedule.
type schedSeq struct {
	spec  int // index into the specs
	slot  int
	steps int // decode steps done
	last  int32
}

// openKernels opens the CPU backend with one kernel set (backend option kernels), or
// skips the test where this CPU lacks its instructions.
func openKernels(t *testing.T, m *checkpoint.Model, o Options, kernels string) *Backend {
	t.Helper()
	o.BackendOptions = map[string]string{"kernels": kernels}
	b, err := Open("cpu", m, o)
	if err != nil && strings.Contains(err.Error(), "lacks the instructions") {
		t.Skipf("kernels %s: %v", kernels, err)
	}
	if err != nil {
		t.Fatalf("open cpu backend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBatchedDecodeMatchesAlone(t *testing.T) {
	lockThread(t)
	for _, kernels := range []string{"auto", "avx2", "plain"} {
		for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
			t.Run(kernels+"/"+ckpt, func(t *testing.T) { checkBatchedMatchesAlone(t, ckpt, kernels) })
		}
	}
}

// checkBatchedMatchesAlone runs ckpt's sequences alone and then batched on one kernel set.
func checkBatchedMatchesAlone(t *testing.T, ckpt, kernels string) {
	m := openModel(t, filepath.Join(checkpointsDir, ckpt))
	specs := batchSpecs(t, ckpt)

	// (a) one at a time in slot 0 of a one-slot engine, one pool thread
	alone := openKernels(t, m, Options{MaxBatch: 1, MaxSeqLen: 160, Threads: 1}, kernels)
	traces := make([]batchTrace, len(specs))
	for i, s := range specs {
		traces[i] = runSeqAlone(t, alone, s)
		if s.want != nil && !slices.Equal(traces[i].tokens, s.want) {
			t.Fatalf("%s alone: tokens %v, reference %v", s.name, traces[i].tokens, s.want)
		}
	}

	// (b) together: four slots, two pool threads. A sequence joins at most every
	// other step into a random free slot while the others are live, rows go in a
	// random order, a finished sequence releases its slot for the next.
	const maxBatch = 4
	b := openKernels(t, m, Options{MaxBatch: maxBatch, MaxSeqLen: 160, Threads: 2}, kernels)
	rng := rand.New(rand.NewPCG(5, 8))
	queue := rng.Perm(len(specs))
	var live []*schedSeq
	slotUsers := make([]int, maxBatch)
	widest := 0
	for step := 0; len(queue) > 0 || len(live) > 0; step++ {
		if len(queue) > 0 && len(live) < maxBatch && step%2 == 0 {
			free := slices.DeleteFunc([]int{0, 1, 2, 3}, func(s int) bool {
				return slices.ContainsFunc(live, func(r *schedSeq) bool { return r.slot == s })
			})
			r := &schedSeq{spec: queue[0], slot: free[rng.IntN(len(free))]}
			queue = queue[1:]
			s := specs[r.spec]
			tok, prob, err := startBatchSeq(b, s, r.slot, true)
			if err != nil {
				t.Fatal(err)
			}
			if tok != traces[r.spec].tokens[0] {
				t.Fatalf("%s: first token %d in slot %d, %d alone", s.name, tok, r.slot, traces[r.spec].tokens[0])
			}
			if ok, where := sameLogitBits(b.Logits(0), traces[r.spec].logits[0]); !ok {
				t.Fatalf("%s: prefill logits in slot %d differ from alone: %s", s.name, r.slot, where)
			}
			checkTokenProb(t, s.name+" prefill", prob, traces[r.spec].logits[0], tok)
			r.last = tok
			slotUsers[r.slot]++
			if s.steps == 0 {
				continue
			}
			live = append(live, r)
		}
		if len(live) == 0 {
			continue
		}
		rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		widest = max(widest, len(live))
		slots := make([]int, len(live))
		tokens := make([]int32, len(live))
		for i, r := range live {
			slots[i], tokens[i] = r.slot, r.last
		}
		next := make([]int32, len(live))
		var prob []float32
		if step%3 != 0 { // probabilities on some steps only: they must change nothing
			prob = make([]float32, len(live))
		}
		if err := decodeStep(b, slots, tokens, next, prob); err != nil {
			t.Fatalf("step %d, slots %v: %v", step, slots, err)
		}
		for i, r := range live {
			s, tr := specs[r.spec], traces[r.spec]
			r.steps++
			if next[i] != tr.tokens[r.steps] {
				t.Fatalf("%s step %d (row %d of %d, slot %d): token %d, alone %d", s.name, r.steps, i, len(live), r.slot, next[i], tr.tokens[r.steps])
			}
			if ok, where := sameLogitBits(b.Logits(i), tr.logits[r.steps]); !ok {
				t.Fatalf("%s step %d (row %d of %d, slot %d): logits differ from alone: %s", s.name, r.steps, i, len(live), r.slot, where)
			}
			if prob != nil {
				checkTokenProb(t, fmt.Sprintf("%s step %d", s.name, r.steps), prob[i], tr.logits[r.steps], next[i])
			}
			r.last = next[i]
		}
		if b.Logits(len(live)) != nil {
			t.Fatalf("step %d: logits of row %d exist after a %d-row step", step, len(live), len(live))
		}
		live = slices.DeleteFunc(live, func(r *schedSeq) bool {
			if r.steps < specs[r.spec].steps {
				return false
			}
			if err := b.Release(r.slot); err != nil {
				t.Fatal(err)
			}
			return true
		})
	}
	if widest != maxBatch {
		t.Errorf("the schedule decoded at most %d sequences together, want %d", widest, maxBatch)
	}
	if slices.Max(slotUsers) < 2 {
		t.Errorf("no slot was reused after a release: %v", slotUsers)
	}
}

func TestReleaseLeavesOtherSlotsUnchanged(t *testing.T) {
	lockThread(t)
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	specs := batchSpecs(t, "tiny-bf16")
	a, other, third := specs[2], specs[0], specs[4] // a runs 15 steps
	ref := runSeqAlone(t, openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 160, Threads: 2}), a)

	b := openBackend(t, m, Options{MaxBatch: 2, MaxSeqLen: 160, Threads: 2})
	tokA, _, err := startBatchSeq(b, a, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	tokO, _, err := startBatchSeq(b, other, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	got := []int32{tokA}
	step := func(slots []int, tokens []int32) []int32 {
		t.Helper()
		next := make([]int32, len(slots))
		if err := decodeStep(b, slots, tokens, next, nil); err != nil {
			t.Fatal(err)
		}
		rowA := slices.Index(slots, 1)
		if ok, where := sameLogitBits(b.Logits(rowA), ref.logits[len(got)]); !ok {
			t.Fatalf("step %d of slot 1 next to %v: logits differ from alone: %s", len(got), slots, where)
		}
		got = append(got, next[rowA])
		return next
	}
	for range 3 { // together
		next := step([]int{0, 1}, []int32{tokO, got[len(got)-1]})
		tokO = next[0]
	}
	// Release slot 0 mid-sequence and put another request there.
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(0); err != nil {
		t.Fatalf("releasing a free slot: %v", err)
	}
	step([]int{1}, []int32{got[len(got)-1]})
	if tokO, _, err = startBatchSeq(b, third, 0, false); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		next := step([]int{1, 0}, []int32{got[len(got)-1], tokO})
		tokO = next[1]
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	for len(got) < len(ref.tokens) {
		step([]int{1}, []int32{got[len(got)-1]})
	}
	if !slices.Equal(got, ref.tokens) || !slices.Equal(got, a.want) {
		t.Fatalf("slot 1 around releases: %v\nalone: %v\nreference: %v", got, ref.tokens, a.want)
	}
}

func TestSlotErrors(t *testing.T) {
	lockThread(t)
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	const maxSeq = 40
	b := openBackend(t, m, Options{MaxBatch: 3, MaxSeqLen: maxSeq, Threads: 2})
	expectErr := func(what string, err error, substr string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), substr) {
			t.Errorf("%s: error %v, want one containing %q", what, err, substr)
		}
	}
	decode := func(slots []int, tokens []int32) ([]int32, error) {
		next := make([]int32, len(slots))
		return next, decodeStep(b, slots, tokens, next, nil)
	}
	text := []int32{151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198}

	// A step on a free slot is its prefill: one token is a prompt.
	if _, err := decode([]int{0}, []int32{1}); err != nil {
		t.Errorf("a one-token step on a free slot: %v", err)
	}
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	expectErr("prefill slot out of range", prefillErr(prefillStep(b, 3, text)), "slot 3 out of range 0..2")
	expectErr("prefill negative slot", prefillErr(prefillStep(b, -1, text)), "slot -1 out of range")
	expectErr("release out of range", b.Release(3), "slot 3 out of range")
	if err := b.Release(2); err != nil {
		t.Errorf("releasing a free slot: %v", err)
	}

	tok1, _, err := prefillStep(b, 1, text)
	if err != nil {
		t.Fatal(err)
	}
	expectErr("prefill into a live slot", prefillErr(prefillStep(b, 1, slices.Repeat(text, 2))), "want 1..16 in all on a live slot")
	expectErr("one slot twice", second(decode([]int{1, 1}, []int32{tok1, tok1})), "slot 1 appears in entries 0 and 1")
	// A free slot next to a live one is its prefill; this one is refused whole for its id.
	expectErr("a free slot next to a live one", second(decode([]int{1, 2}, []int32{tok1, 152681})), "outside the vocabulary")
	expectErr("no rows", second(decode(nil, nil)), "0 slots")
	expectErr("more rows than slots", second(decode([]int{0, 1, 2, 0}, []int32{1, 1, 1, 1})), "4 slots")
	expectErr("token outside the vocabulary", second(decode([]int{1}, []int32{152681})), "outside the vocabulary")

	// Vision keeps its embeddings for one prefill only.
	if err := b.Vision(testPatches(4, 4, 1), 4, 4); err != nil {
		t.Fatal(err)
	}
	img := testPrompt(4)
	tok0, _, err := prefillStep(b, 0, img)
	if err != nil {
		t.Fatal(err)
	}
	expectErr("second prefill without vision", prefillErr(prefillStep(b, 2, img)), "but 0 embeddings are kept")
	if emb, _, _ := b.ImageEmbeddings(); emb != nil {
		t.Error("image embeddings still exposed after the prefill that consumed them")
	}

	// Fill slot 0 (26 prompt tokens) while slot 1 (9) runs next to it: when slot 0 is
	// full, a step with both fails whole, and slot 1 continues as if it had not been
	// tried: the same tokens as the same prompt alone.
	ref := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: maxSeq, Threads: 1})
	refTok, err := prefill1(ref, text)
	if err != nil {
		t.Fatal(err)
	}
	if refTok != tok1 {
		t.Fatalf("slot 1's first token %d, alone %d", tok1, refTok)
	}
	for pos := len(img); pos < maxSeq; pos++ {
		next, err := decode([]int{0, 1}, []int32{tok0, tok1})
		if err != nil {
			t.Fatalf("decode at slot 0 position %d: %v", pos, err)
		}
		if refTok, err = decode1(ref, refTok); err != nil {
			t.Fatal(err)
		}
		tok0, tok1 = next[0], next[1]
	}
	expectErr("a full slot in the step", second(decode([]int{1, 0}, []int32{tok1, tok0})), "entry 1: slot 0 holds 40 tokens; 1 pending would make 41, over max_seq_len 40")
	next, err := decode([]int{1}, []int32{tok1})
	if err != nil {
		t.Fatal(err)
	}
	if refTok, err = decode1(ref, refTok); err != nil {
		t.Fatal(err)
	}
	if next[0] != refTok {
		t.Errorf("slot 1 after the failed step: token %d, alone %d", next[0], refTok)
	}
	if ok, where := sameLogitBits(b.Logits(0), ref.Logits(0)); !ok {
		t.Errorf("slot 1 after the failed step: logits differ from alone: %s", where)
	}

	// Reset frees every slot and forgets the embeddings.
	if err := b.Vision(testPatches(4, 4, 1), 4, 4); err != nil {
		t.Fatal(err)
	}
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	// Slot 1 is free again: a one-token step is its prefill.
	if _, err := decode([]int{1}, []int32{tok1}); err != nil {
		t.Errorf("a one-token step on a slot freed by reset: %v", err)
	}
	expectErr("prefill after reset", prefillErr(prefillStep(b, 0, img)), "but 0 embeddings are kept")
	if _, _, err := prefillStep(b, 0, text); err != nil {
		t.Errorf("prefill into a slot freed by reset: %v", err)
	}
}

// TestRowsKernelIsBatchInvariant checks the batched kernel itself: every (weight row,
// activation row) result has the same bits whatever the number of activation rows, on
// the selected kernels, the plain C ones and the AVX2 ones (where the CPU has AVX2), for
// every dtype and lengths with and without a partial last vector; and each is a correct
// dot product.
func TestRowsKernelIsBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []checkpoint.DType{checkpoint.F32, checkpoint.F16, checkpoint.BF16} {
		for _, n := range []int{1, 5, 8, 16, 17, 31, 64, 100, 2051} {
			const rows, nx = 9, 16
			w := make([]float32, rows*n)
			for i := range w {
				w[i] = 2*rng.Float32() - 1
			}
			raw, exact := encodeRow(w, dt)
			x := make([]float32, nx*n)
			for i := range x {
				x[i] = 2*rng.Float32() - 1
			}
			for _, set := range kernelSets {
				what := fmt.Sprintf("%v n=%d %s kernels", dt, n, set)
				if _, isa := dotProbe(set, dt, raw, x[:n]); isa == "none" {
					continue // no AVX2 on this CPU
				}
				all := rowsProbe(set, dt, raw, rows, n, x)
				for r := range rows {
					for c := range nx {
						var want float64
						for i := range n {
							want += float64(exact[r*n+i]) * float64(x[c*n+i])
						}
						if d := math.Abs(float64(all[c*rows+r]) - want); d > 1e-5*float64(n) {
							t.Errorf("%s: row %d . x%d = %g, exact %g", what, r, c, all[c*rows+r], want)
						}
					}
				}
				for _, k := range []int{1, 2, 3, 5, 8, 11} {
					part := rowsProbe(set, dt, raw, rows, n, x[(nx-k)*n:])
					for c := range k {
						for r := range rows {
							if got, ref := part[c*rows+r], all[(nx-k+c)*rows+r]; math.Float32bits(got) != math.Float32bits(ref) {
								t.Fatalf("%s: row %d . x%d is %g in a batch of %d, %g in a batch of %d", what, r, nx-k+c, got, k, ref, nx)
							}
						}
					}
				}
				// rows 2..8 alone (an odd start and count) give the bits they give among 9
				part := rowsProbe(set, dt, raw[2*n*len(raw)/(rows*n):], rows-2, n, x)
				for c := range nx {
					for r := range rows - 2 {
						if math.Float32bits(part[c*(rows-2)+r]) != math.Float32bits(all[c*rows+r+2]) {
							t.Fatalf("%s: row %d . x%d changes with the rows computed next to it", what, r+2, c)
						}
					}
				}
			}
		}
	}
}

// TestTokenProbabilityKernel checks the sum behind token probabilities over a full-size
// vocabulary: within 1e-6 of float64 on every kernel set.
func TestTokenProbabilityKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{1, 15, 17, 152681} {
		x := make([]float32, n)
		m := float32(math.Inf(-1))
		for i := range x {
			x[i] = 30*rng.Float32() - 25
			m = max(m, x[i])
		}
		x[0] = -200 // far below the rest: underflows to (nearly) zero
		if n == 1 {
			m = x[0]
		}
		var want float64
		for _, v := range x {
			want += math.Exp(float64(v) - float64(m))
		}
		for _, set := range kernelSets {
			got := expsumProbe(set, x, m)
			if math.IsNaN(got) && set == kernelsAVX2 {
				continue // no AVX2 on this CPU
			}
			if d := math.Abs(got-want) / want; !(d <= 1e-6) {
				t.Errorf("n=%d %s kernels: sum %g, float64 %g (%.2g relative)", n, set, got, want, d)
			}
		}
	}
}

// TestActivationKernels checks the vision GELU (tanh form) and the attention softmax of
// every kernel set against float64: GELU within 1e-6 of |x| (exact arithmetic rounds to
// within 6e-8; 1e-6 still catches a wrong constant or form), softmax within 1e-6 relative
// per element and summing to 1, over lengths that leave partial vectors and inputs that
// reach exp's clamps.
func TestActivationKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 11))
	for _, n := range []int{1, 15, 16, 17, 1000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = 24*rng.Float32() - 12
		}
		x[0] = -100 // exp clamps: GELU of a large negative is -0 to float precision
		if n > 1 {
			x[1] = -1e20 // its cube overflows float
		}
		for _, set := range kernelSets {
			got, ok := geluProbe(set, x)
			if !ok {
				continue // this CPU lacks the set
			}
			for i, v := range x {
				u := math.Sqrt(2/math.Pi) * (float64(v) + 0.044715*math.Pow(float64(v), 3))
				want := 0.5 * float64(v) * (1 + math.Tanh(u))
				if d := math.Abs(float64(got[i]) - want); !(d <= 1e-6*max(1, math.Abs(float64(v)))) { // NaN fails too
					t.Fatalf("n=%d %s gelu(%g) = %g, want %g", n, set, v, got[i], want)
				}
			}
			sm, _ := softmaxProbe(set, x)
			mx := math.Inf(-1)
			for _, v := range x {
				mx = max(mx, float64(v))
			}
			var z, total float64
			for _, v := range x {
				z += math.Exp(float64(v) - mx)
			}
			for i, v := range x {
				want := math.Exp(float64(v)-mx) / z
				if d := math.Abs(float64(sm[i]) - want); d > 1e-6*want+1e-12 {
					t.Fatalf("n=%d %s softmax[%d] = %g, want %g", n, set, i, sm[i], want)
				}
				total += float64(sm[i])
			}
			if math.Abs(total-1) > 1e-5 {
				t.Fatalf("n=%d %s softmax sums to %g", n, set, total)
			}
		}
	}
}
