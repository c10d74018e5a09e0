package sim_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/answer"
	"github.com/locateanything/detect/engine/prompt"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/engine/tokenizer"
)

// bundledModel has the tokenizer the simulated model reads and writes with: the real
// format, with LocateAnything's added tokens (<ref>, <box>, <0>..<1000>).
const bundledModel = "../../models/tiny-shapes"

// fixture is a simulated chip with the bundled tokenizer.
type fixture struct {
	tok   *tokenizer.Tokenizer
	eos   int32
	meter *sim.Meter
	b     *sim.Backend
}

// zeroCosts runs the device at no cost, for tests about answers.
var zeroCosts = sim.Costs{Speed: 1}

func newFixture(t *testing.T, costs sim.Costs, maxBatch int) *fixture {
	t.Helper()
	tok, err := tokenizer.Load(bundledModel)
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.ID("<|im_end|>")
	img, _ := tok.ID(prompt.ImageToken)
	f := &fixture{tok: tok, eos: eos, meter: &sim.Meter{}}
	f.b, err = sim.New(sim.Options{
		Costs: costs, MaxBatch: maxBatch, MaxSeqLen: 2048, Tokenizer: tok, EOS: eos,
		ImageToken: img, PatchSize: 14, MergeKernel: 2, Meter: f.meter,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.b.Close() })
	return f
}

// request is one image (as patches) and one prompt.
type request struct {
	gridH, gridW int
	patches      []float32
	ids          []int32
}

// newRequest makes patches from seed on a small grid and the prompt for task and query.
func (f *fixture) newRequest(t *testing.T, seed uint64, task engine.Task, query string) request {
	t.Helper()
	r := request{gridH: 4, gridW: 6}
	rng := rand.New(rand.NewPCG(seed, 1))
	r.patches = make([]float32, r.gridH*r.gridW*3*14*14)
	for i := range r.patches {
		r.patches[i] = rng.Float32()*2 - 1
	}
	var err error
	if r.ids, err = prompt.Tokens(f.tok, task, query, r.gridH*r.gridW/4); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs vision and prefill for r in slot and returns the first token and its
// probability.
func (f *fixture) start(t *testing.T, r request, slot int) (int32, float32) {
	t.Helper()
	if err := f.b.Vision(r.patches, r.gridH, r.gridW); err != nil {
		t.Fatal(err)
	}
	first, prob, err := prefillStep(f.b, slot, r.ids)
	if err != nil {
		t.Fatal(err)
	}
	return first, prob
}

// alone runs r by itself in slot 0 until EOS (at most limit tokens).
func (f *fixture) alone(t *testing.T, r request, limit int) []int32 {
	t.Helper()
	toks, _ := f.aloneWithProbs(t, r, limit)
	return toks
}

// aloneWithProbs is alone with each token's probability.
func (f *fixture) aloneWithProbs(t *testing.T, r request, limit int) ([]int32, []float32) {
	t.Helper()
	first, prob := f.start(t, r, 0)
	toks, probs := []int32{first}, []float32{prob}
	next, nextProb := make([]int32, 1), make([]float32, 1)
	for toks[len(toks)-1] != f.eos {
		if len(toks) == limit {
			t.Fatalf("no EOS in %d tokens: %q", limit, f.tok.Decode(toks))
		}
		if err := decodeStep(f.b, []int{0}, toks[len(toks)-1:], next, nextProb); err != nil {
			t.Fatal(err)
		}
		toks, probs = append(toks, next[0]), append(probs, nextProb[0])
	}
	if err := f.b.Release(0); err != nil {
		t.Fatal(err)
	}
	return toks, probs
}

// TestTokenProbabilities: every token comes with a probability between 0.5 and 1 that
// varies from token to token, the same for the same request, and asking for it changes
// no token.
func TestTokenProbabilities(t *testing.T) {
	f := newFixture(t, zeroCosts, 1)
	r := f.newRequest(t, 1, engine.TaskDetect, "person</c>red car")
	toks, probs := f.aloneWithProbs(t, r, 200)
	distinct := map[float32]bool{}
	for i, p := range probs {
		if !(p >= 0.5 && p <= 1) {
			t.Errorf("token %d: probability %v, want 0.5..1", i, p)
		}
		distinct[p] = true
	}
	if len(distinct) < len(probs)/2 {
		t.Errorf("%d distinct probabilities over %d tokens: %v", len(distinct), len(probs), probs)
	}
	again, againProbs := f.aloneWithProbs(t, r, 200)
	if !slices.Equal(again, toks) || !slices.Equal(againProbs, probs) {
		t.Errorf("the same request gave other probabilities:\n%v\n%v", probs, againProbs)
	}
	if plain := f.alone(t, r, 200); !slices.Equal(plain, toks) {
		t.Errorf("asking for probabilities changed the tokens")
	}
}

// TestAnswersAreWellFormedAndDeterministic: a detect query of three categories is answered
// with one <ref> per category, in order, and one to three boxes each, then EOS; the same
// image answers the same, another image differently.
func TestAnswersAreWellFormedAndDeterministic(t *testing.T) {
	f := newFixture(t, zeroCosts, 1)
	cats := []string{"person", "red car", "dog"}
	r := f.newRequest(t, 1, engine.TaskDetect, strings.Join(cats, prompt.CategorySep))
	toks := f.alone(t, r, 200)
	raw := f.tok.Decode(toks)
	if !strings.HasSuffix(raw, "</box><|im_end|>") || strings.Count(raw, "<|im_end|>") != 1 {
		t.Fatalf("answer %q does not end with a box and one EOS", raw)
	}
	if got := strings.Count(raw, "<ref>"); got != len(cats) {
		t.Fatalf("answer %q has %d <ref>, want one per category (%d)", raw, got, len(cats))
	}
	dets, pts := answer.Parse(raw, 1920, 1080)
	if len(pts) != 0 {
		t.Errorf("a detect answer has points: %v", pts)
	}
	perLabel := map[string]int{}
	var order []string
	for _, d := range dets {
		if perLabel[d.Label] == 0 {
			order = append(order, d.Label)
		}
		perLabel[d.Label]++
		if n := d.BoxNorm; n[0] >= n[2] || n[1] >= n[3] || n[2] > 1000 || n[3] > 1000 {
			t.Errorf("degenerate box %v", n)
		}
	}
	if !slices.Equal(order, cats) {
		t.Fatalf("labels %v, want the categories in order %v (answer %q)", order, cats, raw)
	}
	for _, c := range cats {
		if n := perLabel[c]; n < 1 || n > 3 {
			t.Errorf("%s: %d boxes, want 1 to 3", c, n)
		}
	}
	// The raw text has exactly as many boxes as the parser kept: none repeated, none broken.
	if got := strings.Count(raw, "<box>"); got != len(dets) {
		t.Errorf("%d boxes written, %d parsed", got, len(dets))
	}

	if again := f.alone(t, r, 200); !slices.Equal(again, toks) {
		t.Errorf("the same request answered\n%q\nthen\n%q", raw, f.tok.Decode(again))
	}
	other := f.alone(t, f.newRequest(t, 2, engine.TaskDetect, strings.Join(cats, prompt.CategorySep)), 200)
	if slices.Equal(other, toks) {
		t.Errorf("another image gave the same answer %q: the answer does not follow the image", raw)
	}
}

// TestEveryTaskHasItsShapeOfAnswer: points for point, one box for ground_one, the phrase
// as the label for the phrase tasks, "text" for the text task without a phrase.
func TestEveryTaskHasItsShapeOfAnswer(t *testing.T) {
	f := newFixture(t, zeroCosts, 1)
	for _, c := range []struct {
		task     engine.Task
		query    string
		label    string
		points   bool
		maxBoxes int
	}{
		{engine.TaskGround, "the man in a hat", "the man in a hat", false, 3},
		{engine.TaskGroundOne, "the tallest tree", "the tallest tree", false, 1},
		{engine.TaskPoint, "the door handle", "the door handle", true, 3},
		{engine.TaskText, "the shop sign", "the shop sign", false, 3},
		{engine.TaskText, "", "text", false, 3},
		{engine.TaskRegion, "the search box", "the search box", false, 3},
		{engine.TaskDetect, "a <ref>tag</ref>", "a reftag/ref", false, 3},
	} {
		raw := f.tok.Decode(f.alone(t, f.newRequest(t, 7, c.task, c.query), 200))
		dets, pts := answer.Parse(raw, 100, 100)
		n, labels := len(dets), map[string]bool{}
		for _, d := range dets {
			labels[d.Label] = true
		}
		if c.points {
			n = len(pts)
			for _, p := range pts {
				labels[p.Label] = true
			}
			if len(dets) != 0 {
				t.Errorf("%s: boxes in a point answer %q", c.task, raw)
			}
		} else if len(pts) != 0 {
			t.Errorf("%s: points in answer %q", c.task, raw)
		}
		if n < 1 || n > c.maxBoxes || len(labels) != 1 || !labels[c.label] {
			t.Errorf("%s %q: answer %q has %d results labelled %v; want 1..%d labelled %q",
				c.task, c.query, raw, n, labels, c.maxBoxes, c.label)
		}
	}
}

// TestBatchingNeverChangesTokens: sequences decoded together, joining and leaving at
// different steps, in shuffled row orders, generate exactly what each does alone.
func TestBatchingNeverChangesTokens(t *testing.T) {
	f := newFixture(t, zeroCosts, 4)
	queries := []string{"cat", "person</c>bicycle", "red circle</c>blue square</c>green triangle", "kite", "dog</c>dog"}
	var reqs []request
	var want [][]int32
	var wantProbs [][]float32
	for i, q := range queries {
		r := f.newRequest(t, uint64(10+i), engine.TaskDetect, q)
		reqs = append(reqs, r)
		toks, probs := f.aloneWithProbs(t, r, 300)
		want, wantProbs = append(want, toks), append(wantProbs, probs)
	}

	// Continuous batching by hand: admit the next request whenever a slot is free, step
	// every live one together in a shuffled order, release each at EOS.
	type live struct {
		req   int
		slot  int
		toks  []int32
		probs []float32
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var running []*live
	got := make([][]int32, len(reqs))
	gotProbs := make([][]float32, len(reqs))
	free := []int{3, 2, 1, 0}
	nextReq := 0
	for nextReq < len(reqs) || len(running) > 0 {
		// Admit at most one per step, so the sequences are staggered.
		if nextReq < len(reqs) && len(free) > 0 {
			slot := free[len(free)-1]
			free = free[:len(free)-1]
			first, prob := f.start(t, reqs[nextReq], slot)
			running = append(running, &live{req: nextReq, slot: slot, toks: []int32{first}, probs: []float32{prob}})
			nextReq++
		}
		rng.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
		var slots []int
		var toks []int32
		for _, l := range running {
			slots = append(slots, l.slot)
			toks = append(toks, l.toks[len(l.toks)-1])
		}
		next, probs := make([]int32, len(slots)), make([]float32, len(slots))
		if err := decodeStep(f.b, slots, toks, next, probs); err != nil {
			t.Fatal(err)
		}
		kept := running[:0]
		for i, l := range running {
			l.toks, l.probs = append(l.toks, next[i]), append(l.probs, probs[i])
			if next[i] == f.eos {
				got[l.req], gotProbs[l.req] = l.toks, l.probs
				if err := f.b.Release(l.slot); err != nil {
					t.Fatal(err)
				}
				free = append(free, l.slot)
				continue
			}
			kept = append(kept, l)
		}
		running = kept
	}
	for i := range reqs {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%q batched:\n%q\nalone:\n%q", queries[i], f.tok.Decode(got[i]), f.tok.Decode(want[i]))
		}
		if !slices.Equal(gotProbs[i], wantProbs[i]) {
			t.Errorf("%q batched, probabilities:\n%v\nalone:\n%v", queries[i], gotProbs[i], wantProbs[i])
		}
	}
	if m := f.meter.Read(); m.MeanBatch() <= 1.5 {
		t.Errorf("mean batch %.2f: the test did not batch", m.MeanBatch())
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestCostsAreSleptNotSpent: a run takes at least its modelled device time, the meter adds
// up exactly the model's costs (a decode step costs the chip's whole batch, idle rows
// included), and the host spends almost no CPU on it (the device sleeps; it does not spin).
func TestCostsAreSleptNotSpent(t *testing.T) {
	costs := sim.Costs{Vision: 40 * time.Millisecond, Prefill: 60 * time.Millisecond, Decode: 20 * time.Millisecond, BatchAlpha: 0.5, Speed: 2}
	f := newFixture(t, costs, 3) // three slots, two of them used
	a := f.newRequest(t, 1, engine.TaskDetect, "person</c>car")
	b := f.newRequest(t, 2, engine.TaskDetect, "dog")

	cpu0, wall0 := cpuTime(t), time.Now()
	ta, _ := f.start(t, a, 0)
	tb, _ := f.start(t, b, 1)
	next := make([]int32, 2)
	steps := 0
	for range 10 { // ten steps of both, whatever the answers say
		if ta == f.eos || tb == f.eos {
			break
		}
		if err := decodeStep(f.b, []int{0, 1}, []int32{ta, tb}, next, nil); err != nil {
			t.Fatal(err)
		}
		ta, tb = next[0], next[1]
		steps++
	}
	wall, cpu := time.Since(wall0), cpuTime(t)-cpu0

	// Costs at speed 2: vision on a 4x6 grid (24 of the 1056 reference patches), prefill
	// padded to 128 of 512, steps of the chip's three rows at twice the decode cost.
	want := 2*costs.VisionCost(4, 6) + 2*costs.PrefillCost(128) + time.Duration(steps)*costs.StepCost(3)
	if costs.StepCost(3) != 20*time.Millisecond || costs.PrefillCost(128) != 7500*time.Microsecond {
		t.Fatalf("cost model: step of 3 rows %s (want 20ms), prefill of 128 %s (want 7.5ms)", costs.StepCost(3), costs.PrefillCost(128))
	}
	if steps < 5 {
		t.Fatalf("only %d steps before an EOS: the answers are shorter than any plan should be", steps)
	}
	if got := f.meter.Read(); got.Busy != want || got.Steps != int64(steps) || got.Rows != int64(2*steps) || got.Sequences != 2 {
		t.Errorf("meter %+v, want busy %s over %d steps of 2 rows and 2 sequences", got, want, steps)
	}
	if got := f.meter.Read(); got.Late < 0 || got.Busy > wall {
		t.Errorf("device time %s (lateness forgiven %s) does not fit in the run's %s", got.Busy, got.Late, wall)
	}
	if wall < want*9/10 {
		t.Errorf("the run took %s, under its modelled device time %s", wall, want)
	}
	if cpu > wall/4 {
		t.Errorf("the run spent %s of CPU in %s of wall time: the simulated device burns CPU", cpu, wall)
	}
}

func TestCostModel(t *testing.T) {
	c := sim.Costs{Vision: 49 * time.Millisecond, Prefill: 58 * time.Millisecond, Decode: 24 * time.Millisecond, BatchAlpha: 0.05, Speed: 1}
	if got := c.VisionCost(24, 44); got != 49*time.Millisecond {
		t.Errorf("vision on the reference grid: %s", got)
	}
	if got := c.PrefillCost(sim.PrefillLength(303)); got != 58*time.Millisecond {
		t.Errorf("prefill of the 303-token demo prompt: %s, want 58ms (padded to 512)", got)
	}
	if got := c.PrefillCost(sim.PrefillLength(600)); got != 116*time.Millisecond {
		t.Errorf("prefill of 600 tokens (padded to 1024): %s, want 116ms", got)
	}
	if got := c.StepCost(1); got != 24*time.Millisecond {
		t.Errorf("a step of one: %s", got)
	}
	if got := c.StepCost(8); got != 32400*time.Microsecond {
		t.Errorf("a step of 8 at alpha 0.05: %s, want 24ms * 1.35", got)
	}
	c.Speed = 10
	if got := c.StepCost(1); got != 2400*time.Microsecond {
		t.Errorf("a step of one at speed 10: %s", got)
	}
	for n, want := range map[int]int{1: 128, 128: 128, 129: 256, 303: 512, 512: 512, 513: 1024} {
		if got := sim.PrefillLength(n); got != want {
			t.Errorf("PrefillLength(%d) = %d, want %d", n, got, want)
		}
	}
	for _, bad := range []sim.Costs{{Speed: 0}, {Speed: 1, BatchAlpha: -1}, {Speed: 1, Decode: -time.Millisecond}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestMisuseFailsLikeTheChip: the calls a host could get wrong fail with a message and
// leave the backend usable.
func TestMisuseFailsLikeTheChip(t *testing.T) {
	f := newFixture(t, zeroCosts, 2)
	r := f.newRequest(t, 1, engine.TaskDetect, "cat")
	if _, _, err := prefillStep(f.b, 0, r.ids); err == nil || !strings.Contains(err.Error(), "vision") {
		t.Errorf("prefill without vision: %v", err)
	}
	if err := f.b.Vision(r.patches[1:], r.gridH, r.gridW); err == nil {
		t.Error("vision accepted a short patch buffer")
	}
	if err := f.b.Vision(r.patches, r.gridH, r.gridW); err != nil {
		t.Fatal(err)
	}
	if _, _, err := prefillStep(f.b, 0, r.ids[:len(r.ids)/2]); err == nil || !strings.Contains(err.Error(), "image tokens") {
		t.Errorf("prefill with half the image tokens: %v", err)
	}
	first, _ := f.start(t, r, 0)
	if err := f.b.Vision(r.patches, r.gridH, r.gridW); err != nil {
		t.Fatal(err)
	}
	// On a live slot the prompt is pending tokens, at most StepMaxRows of them.
	if _, _, err := prefillStep(f.b, 0, r.ids); err == nil || !strings.Contains(err.Error(), "pending and 0 block tokens") {
		t.Errorf("prefill into a live slot: %v", err)
	}
	next := make([]int32, 2)
	for _, c := range []struct {
		slots  []int
		tokens []int32
		want   string
	}{
		{[]int{1}, []int32{first}, "prefill: the prompt has 0 image tokens"}, // a step on a free slot is its prefill
		{[]int{0}, []int32{first + 1}, "was fed"},
		{[]int{0, 0}, []int32{first, first}, "twice"},
		{[]int{5}, []int32{first}, "out of range"},
	} {
		if err := decodeStep(f.b, c.slots, c.tokens, next[:len(c.slots)], nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("decode %v %v: %v, want an error about %q", c.slots, c.tokens, err, c.want)
		}
	}
	if err := decodeStep(f.b, []int{0}, []int32{first}, next[:1], nil); err != nil {
		t.Errorf("a good step after the refused ones: %v", err)
	}
	if err := f.b.Release(0); err != nil {
		t.Fatal(err)
	}
	if err := f.b.Release(0); err != nil {
		t.Errorf("releasing a free slot: %v", err)
	}
	f.b.Close()
	if err := f.b.Vision(r.patches, r.gridH, r.gridW); err != sim.ErrClosed {
		t.Errorf("vision after Close: %v", err)
	}
}
