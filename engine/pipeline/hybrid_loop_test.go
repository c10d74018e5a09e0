package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/blockdecode/golden"
	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/engine/tokenizer"
)

// The block-trained test model's goldens: every path of hybrid decoding on 96 scenes.
const blocksDir = "../../tools/refmodel/testdata/hybrid/tiny-shapes-blocks"

// replayBackend is a test double that answers each slot's Steps with the rows the
// reference recorded for one golden run, and checks that the loop fed it what the
// reference's loop fed the model: the pending tokens, the block and where it sits, one
// output row in one-token mode. It stands in only for the forward pass; the loop and the
// rules under test are the real ones.
type replayBackend struct {
	tok      *blockdecode.Tokens
	maxBatch int
	queue    []*golden.Run // what the next prefill in any slot replays
	slots    []*replaySlot // by slot; nil = free
	calls    []int         // each decoding Step call's number of slots (prefills not counted)
	fail     error         // the first thing the loop got wrong
}

type replaySlot struct {
	run       *golden.Run
	step      int
	committed []int32 // prompt and generated tokens, as the reference committed them
	cached    int     // positions the cache holds
}

func newReplay(t *testing.T, tok *blockdecode.Tokens, maxBatch int, runs ...*golden.Run) *replayBackend {
	b := &replayBackend{tok: tok, maxBatch: maxBatch, queue: runs, slots: make([]*replaySlot, maxBatch)}
	t.Cleanup(func() {
		if b.fail != nil {
			t.Errorf("replay: %v", b.fail)
		}
	})
	return b
}

func (b *replayBackend) failf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if b.fail == nil {
		b.fail = err
	}
	return err
}

func (b *replayBackend) Name() string                     { return "replay" }
func (b *replayBackend) MaxBatch() int                    { return b.maxBatch }
func (b *replayBackend) Vision([]float32, int, int) error { return nil }
func (b *replayBackend) PrefillLength(n int) int          { return n }
func (b *replayBackend) Close() error                     { return nil }
func (b *replayBackend) Reset() error                     { clear(b.slots); return nil }
func (b *replayBackend) Release(slot int) error           { b.slots[slot] = nil; return nil }

// prefill takes a step on a free slot: the next run's prompt, cached with no output row.
func (b *replayBackend) prefill(ss engine.StepSlot) error {
	if !ss.NoOutput || len(ss.Block) > 0 {
		return b.failf("an AR prefill in a hybrid test")
	}
	if len(b.queue) == 0 {
		return b.failf("no run left to replay")
	}
	run := b.queue[0]
	b.queue = b.queue[1:]
	if !slices.Equal(ss.Pending, run.PromptIDs) {
		return b.failf("%s: prefill of %d ids, not the run's prompt", run.Case, len(ss.Pending))
	}
	b.slots[ss.Slot] = &replaySlot{run: run, committed: slices.Clone(ss.Pending), cached: len(ss.Pending)}
	return nil
}

func (b *replayBackend) Step(slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow) error {
	if len(slots) == 1 && b.slots[slots[0].Slot] == nil {
		return b.prefill(slots[0])
	}
	b.calls = append(b.calls, len(slots))
	if k < blockdecode.K || !slices.Equal(watch, b.tok.Watch()) || len(rows) != engine.StepRows(slots) {
		return b.failf("step with k %d, watch %v and %d rows", k, watch, len(rows))
	}
	r := 0
	for _, ss := range slots {
		s := b.slots[ss.Slot]
		if s == nil {
			return b.failf("step on free slot %d", ss.Slot)
		}
		if s.step >= len(s.run.Steps) {
			return b.failf("%s: step %d, the reference stopped after %d", s.run.Case, s.step, len(s.run.Steps))
		}
		g := &s.run.Steps[s.step]
		// The reference's first step feeds the whole prompt; here the prefill has.
		if want := s.committed[s.cached:]; !slices.Equal(ss.Pending, want) || (s.step == 0 && g.Pending != len(s.run.PromptIDs)) ||
			(s.step > 0 && g.Pending != len(ss.Pending)) {
			return b.failf("%s step %d: pending %v, want %v (the reference's %d)", s.run.Case, s.step, ss.Pending, want, g.Pending)
		}
		s.cached += len(ss.Pending)
		if (ss.Block != nil) != (g.Kind == "block") {
			return b.failf("%s step %d: block %v, the reference's step is %s", s.run.Case, s.step, ss.Block, g.Kind)
		}
		want := g.Rows(b.tok, k)
		if ss.Block != nil {
			block := append([]int32{s.committed[len(s.committed)-1]}, slices.Repeat([]int32{b.tok.TextMask}, blockdecode.Size-1)...)
			if !slices.Equal(ss.Block, block) || s.cached-1 != g.Slot0 {
				return b.failf("%s step %d: block %v with slot 0 at %d, want %v at %d", s.run.Case, s.step, ss.Block, s.cached-1, block, g.Slot0)
			}
		}
		for _, w := range want {
			copy(rows[r].TopIDs, w.TopIDs)
			copy(rows[r].TopProbs, w.TopProbs)
			copy(rows[r].Watch, w.Watch)
			r++
		}
		s.committed = append(s.committed, g.Committed...)
		s.step++
	}
	return nil
}

func loadGolden(t *testing.T, name string) *golden.File {
	t.Helper()
	f, err := golden.Load(golden.Dir + name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// replayPipeline is a Pipeline over b with the tiny-shapes tokenizer.
func replayPipeline(t *testing.T, b engine.Backend, tok *blockdecode.Tokens, mode engine.GenerationMode) *Pipeline {
	t.Helper()
	tk, err := tokenizer.Load(blocksDir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(b, tk, Config{
		Preprocess:   imageproc.Options{InTokenLimit: 64, PatchSize: 14, MergeKernel: 2, Std: [3]float32{1, 1, 1}},
		MaxSeqLen:    1024,
		MaxNewTokens: 48, MaxNewTokensCap: 64,
		EOS:            tok.IMEnd,
		GenerationMode: mode,
		Hybrid:         tok,
		Info:           engine.Info{Model: "replay"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hybridPrepared(run *golden.Run, budget int) *engine.Prepared {
	return &engine.Prepared{PromptIDs: run.PromptIDs, MaxNewTokens: budget, GenerationMode: engine.GenerationHybrid,
		Width: 448, Height: 448, Request: engine.Request{Query: run.Query}}
}

// Every one of the 96 runs, through Generate: the loop feeds the pending tokens and the
// block where the reference did, switches to one-token steps and back when it did, and
// commits the reference's tokens; the prediction says hybrid and counts its steps.
func TestHybridLoopReplaysTheReference(t *testing.T) {
	f := loadGolden(t, "tiny-shapes-blocks.json")
	tok := f.TokenIDs.Tokens()
	oneToken := 0
	for i := range f.Runs {
		run := &f.Runs[i]
		b := newReplay(t, tok, 1, run)
		p := replayPipeline(t, b, tok, "")
		pred, err := p.Generate(context.Background(), hybridPrepared(run, run.MaxNew))
		if err != nil {
			t.Fatalf("%s: %v", run.Case, err)
		}
		if !slices.Equal(pred.Tokens, run.Tokens) {
			t.Fatalf("%s: tokens\n got %v\nwant %v", run.Case, pred.Tokens, run.Tokens)
		}
		if pred.DecodeSteps != len(run.Steps) || pred.GenerationMode != engine.GenerationHybrid ||
			pred.DecodeMode != DecodeModeHybrid || len(pred.Probs) != len(pred.Tokens) || pred.NumGeneratedTokens != len(run.Tokens) {
			t.Fatalf("%s: %d steps (reference %d), mode %s, decode mode %s, %d probabilities", run.Case, pred.DecodeSteps,
				len(run.Steps), pred.GenerationMode, pred.DecodeMode, len(pred.Probs))
		}
		if last := run.Tokens[len(run.Tokens)-1]; pred.StoppedOnEOS != (last == tok.IMEnd) {
			t.Fatalf("%s: stopped on EOS %v, last token %d", run.Case, pred.StoppedOnEOS, last)
		}
		for j, pr := range pred.Probs {
			if !(pr > 0 && pr <= 1) {
				t.Fatalf("%s: token %d (%d) has probability %v", run.Case, j, pred.Tokens[j], pr)
			}
		}
		oneToken += run.Summary.ARSteps
	}
	if oneToken == 0 {
		t.Fatal("no run took a one-token step")
	}
}

// A smaller budget cuts the same generation: every budget from 1 to the run's length gives
// the reference's tokens up to it, in the steps the reference needed to reach it.
func TestHybridLoopBudgetCut(t *testing.T) {
	f := loadGolden(t, "tiny-shapes-blocks.json")
	tok := f.TokenIDs.Tokens()
	for _, run := range []*golden.Run{&f.Runs[0], &f.Runs[1], &f.Runs[2]} {
		for budget := 1; budget <= len(run.Tokens); budget++ {
			b := newReplay(t, tok, 1, run)
			p := replayPipeline(t, b, tok, engine.GenerationHybrid)
			pred, err := p.Generate(context.Background(), hybridPrepared(run, budget))
			if err != nil {
				t.Fatalf("%s budget %d: %v", run.Case, budget, err)
			}
			steps, n := 0, 0
			for n < budget {
				n += len(run.Steps[steps].Committed)
				steps++
			}
			if !slices.Equal(pred.Tokens, run.Tokens[:budget]) || pred.DecodeSteps != steps {
				t.Fatalf("%s budget %d: %v in %d steps, want %v in %d", run.Case, budget, pred.Tokens, pred.DecodeSteps,
					run.Tokens[:budget], steps)
			}
			if pred.StoppedOnEOS != (run.Tokens[budget-1] == tok.IMEnd) {
				t.Fatalf("%s budget %d: stopped on EOS %v", run.Case, budget, pred.StoppedOnEOS)
			}
		}
	}
}

// Continuous batching through the Batcher methods, as engine/chip drives them: the runs
// enter as slots free up, every step puts all running sequences in one backend Step call,
// and each sequence's tokens are the reference's, as alone.
func TestHybridBatchedReplay(t *testing.T) {
	f := loadGolden(t, "tiny-shapes-blocks.json")
	tok := f.TokenIDs.Tokens()
	runs := make([]*golden.Run, len(f.Runs))
	for i := range f.Runs {
		runs[i] = &f.Runs[i]
	}
	const batch = 5
	b := newReplay(t, tok, batch, runs...)
	p := replayPipeline(t, b, tok, engine.GenerationHybrid)
	next, finished := 0, 0
	var running []*engine.Sequence
	want := map[*engine.Sequence]*golden.Run{}
	steps, mixed := 0, false
	for finished < len(runs) {
		for len(running) < batch && next < len(runs) {
			s, err := p.Start(hybridPrepared(runs[next], runs[next].MaxNew))
			if err != nil {
				t.Fatal(err)
			}
			if s.Done || len(s.Tokens) != 0 || s.Mode != engine.GenerationHybrid {
				t.Fatalf("a hybrid start: done %v, %d tokens, mode %s", s.Done, len(s.Tokens), s.Mode)
			}
			want[s] = runs[next]
			running = append(running, s)
			next++
		}
		if err := p.Step(running); err != nil {
			t.Fatal(err)
		}
		steps++
		if got := b.calls[len(b.calls)-1]; got != len(running) || len(b.calls) != steps {
			t.Fatalf("step %d: %d Step calls, the last with %d slots, for %d sequences", steps, len(b.calls), got, len(running))
		}
		one, blocks := false, false
		live := running[:0]
		for _, s := range running {
			one, blocks = one || s.OneToken, blocks || !s.OneToken
			if !s.Done {
				live = append(live, s)
				continue
			}
			pred, err := p.Finish(s)
			if err != nil {
				t.Fatal(err)
			}
			if r := want[s]; !slices.Equal(pred.Tokens, r.Tokens) || pred.DecodeSteps != len(r.Steps) {
				t.Fatalf("%s batched: %v in %d steps, want %v in %d", r.Case, pred.Tokens, pred.DecodeSteps, r.Tokens, len(r.Steps))
			}
			finished++
		}
		mixed = mixed || (one && blocks)
		running = live
	}
	if !mixed {
		t.Error("no step mixed one-token and block sequences")
	}
}

// <|im_end|> inside a text block ends generation right after it; the block's later
// tokens are never committed.
func TestHybridLoopStopsAtEOSInsideABlock(t *testing.T) {
	f := loadGolden(t, "tiny-shapes-blocks.json")
	tok := f.TokenIDs.Tokens()
	ids := []int32{7, 8, tok.IMEnd, 9, 10, 11}
	step := golden.Step{Kind: "block", Pending: 3, Slot0: 2, X0: ids, X0P: make([]float32, 6), Type: blockdecode.TypeRefObject,
		Committed: []int32{7, 8, tok.IMEnd}}
	step.Box = &struct {
		Frame     blockdecode.Frame `json:"frame"`
		PBoxStart float32           `json:"p_box_start"`
		PNone1    float32           `json:"p_none_1"`
		PBoxEnd2  float32           `json:"p_box_end_2"`
		PNull3    float32           `json:"p_null_3"`
		PNull4    float32           `json:"p_null_4"`
		EndScore  float32           `json:"end_score"`
		Rows      []golden.Ranked   `json:"rows"`
	}{Frame: blockdecode.FrameIllegal}
	for i, id := range ids {
		step.X0P[i] = 0.8
		step.Top.IDs = append(step.Top.IDs, []int32{id})
		step.Top.Logits = append(step.Top.Logits, []float32{3})
	}
	run := &golden.Run{Case: "eos-inside", PromptIDs: []int32{1, 2, 3}, MaxNew: 20, Steps: []golden.Step{step}}
	b := newReplay(t, tok, 1, run)
	p := replayPipeline(t, b, tok, engine.GenerationHybrid)
	pred, err := p.Generate(context.Background(), hybridPrepared(run, 20))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pred.Tokens, []int32{7, 8, tok.IMEnd}) || !pred.StoppedOnEOS || pred.DecodeSteps != 1 ||
		!slices.Equal(pred.Probs, []float32{0.8, 0.8, 0.8}) {
		t.Fatalf("%v (probabilities %v), stopped on EOS %v, %d steps", pred.Tokens, pred.Probs, pred.StoppedOnEOS, pred.DecodeSteps)
	}
}

// Prepare resolves the generation mode: the request's, else the engine's default, else
// ar; an unknown one, or hybrid on a model without the ids for it, is the request's fault.
func TestPrepareResolvesTheGenerationMode(t *testing.T) {
	f := loadGolden(t, "tiny-shapes-blocks.json")
	tok := f.TokenIDs.Tokens()
	img := testPNG(t)
	for _, c := range []struct {
		engineDefault, asked, want engine.GenerationMode
	}{
		{"", "", engine.GenerationAR},
		{engine.GenerationHybrid, "", engine.GenerationHybrid},
		{engine.GenerationHybrid, engine.GenerationAR, engine.GenerationAR},
		{engine.GenerationAR, engine.GenerationHybrid, engine.GenerationHybrid},
	} {
		p := replayPipeline(t, newReplay(t, tok, 1), tok, c.engineDefault)
		prep, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle", GenerationMode: c.asked})
		if err != nil {
			t.Fatal(err)
		}
		if prep.GenerationMode != c.want {
			t.Errorf("default %q, asked %q: %q, want %q", c.engineDefault, c.asked, prep.GenerationMode, c.want)
		}
	}
	p := replayPipeline(t, newReplay(t, tok, 1), tok, "")
	_, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle", GenerationMode: "fast"})
	if ie := (*engine.InputError)(nil); !errors.As(err, &ie) || ie.Code != engine.CodeBadGeneration {
		t.Errorf("generation mode fast: %v, want a %s input error", err, engine.CodeBadGeneration)
	}

	// A model without the block tokens: AR runs, hybrid is refused, and so is a hybrid default.
	tk, err := tokenizer.Load(blocksDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Preprocess:   imageproc.Options{InTokenLimit: 64, PatchSize: 14, MergeKernel: 2, Std: [3]float32{1, 1, 1}},
		MaxSeqLen:    1024,
		MaxNewTokens: 48, MaxNewTokensCap: 64, EOS: tok.IMEnd,
		NoHybrid: errors.New("config.json: text_config.block_size = 0, want 6"),
	}
	p, err = New(newReplay(t, tok, 1), tk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle"}); err != nil {
		t.Errorf("AR on a model without block tokens: %v", err)
	}
	_, err = p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle", GenerationMode: engine.GenerationHybrid})
	if ie := (*engine.InputError)(nil); !errors.As(err, &ie) || ie.Code != engine.CodeBadGeneration {
		t.Errorf("hybrid on a model without block tokens: %v, want a %s input error", err, engine.CodeBadGeneration)
	}
	cfg.GenerationMode = engine.GenerationHybrid
	if _, err := New(newReplay(t, tok, 1), tk, cfg); err == nil {
		t.Error("a hybrid default on a model without block tokens was accepted")
	}

	// Hybrid needs room for the block that reads five positions past the last token.
	p = replayPipeline(t, newReplay(t, tok, 1), tok, "")
	prep, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle", MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode engine.GenerationMode
		room int
		ok   bool
	}{{engine.GenerationAR, 0, true}, {engine.GenerationHybrid, 3, false}, {engine.GenerationHybrid, 4, true}} {
		p.cfg.MaxSeqLen = len(prep.PromptIDs) + 8 + c.room
		_, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle", MaxNewTokens: 8, GenerationMode: c.mode})
		if ie := (*engine.InputError)(nil); c.ok != (err == nil) || (err != nil && (!errors.As(err, &ie) || ie.Code != engine.CodePromptTooLong)) {
			t.Errorf("%s with %d positions to spare: %v", c.mode, c.room, err)
		}
	}
}

// testPNG is a held-out shape scene.
func testPNG(t *testing.T) []byte {
	t.Helper()
	img, err := os.ReadFile("../../tools/tinymodel/testdata/heldout/05.png")
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// A real checkpoint whose config.json lacks the block fields opens and answers AR
// requests; a hybrid request is refused as the request's fault, naming what is missing.
func TestCheckpointWithoutBlockTokensRefusesHybrid(t *testing.T) {
	dir := t.TempDir()
	entries, err := os.ReadDir(checkpointDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, err := filepath.Abs(filepath.Join(checkpointDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() != "config.json" {
			if err := os.Symlink(src, filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		delete(cfg["text_config"].(map[string]any), "block_size")
		if raw, err = json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := openPipeline(t, OpenOptions{Settings: engine.Settings{InTokenLimit: 64}, WeightsDir: dir})
	if got := p.Info().GenerationModes; !slices.Equal(got, []engine.GenerationMode{engine.GenerationAR}) {
		t.Errorf("Info().GenerationModes = %v, want only ar (what /info offers)", got)
	}
	img := testPNG(t)
	if _, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle"}); err != nil {
		t.Errorf("AR: %v", err)
	}
	_, err = p.Prepare(context.Background(), engine.Request{Image: img, Query: "red circle", GenerationMode: engine.GenerationHybrid})
	if ie := (*engine.InputError)(nil); !errors.As(err, &ie) || ie.Code != engine.CodeBadGeneration || !strings.Contains(err.Error(), "block_size") {
		t.Errorf("hybrid: %v, want a %s input error naming block_size", err, engine.CodeBadGeneration)
	}
}
