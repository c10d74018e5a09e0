package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
)

// stepper drives sequences through the backend's one entry point, Step: a sequence's
// prefill is a step on its free slot with the prompt pending, an AR step one pending token
// per slot with a greedy output row, a hybrid step its pending tokens and a block
// (docs/hybrid-decoding.md, "The loop"). It reuses its argument slices.
type stepper struct {
	eos   int32
	tok   *blockdecode.Tokens // hybrid decoding's ids; nil when the model has none
	mode  blockdecode.Mode    // Hybrid; Fast only in the reference's tests
	watch []int32

	slots  []engine.StepSlot
	blocks []int32
	rows   []engine.StepRow
	rowsK  int // the k and watch count rows was made for
	rowsW  int

	ar, hy []*engine.Sequence // step's split of its batch
}

func newStepper(eos int32, tok *blockdecode.Tokens) *stepper {
	st := &stepper{eos: eos, tok: tok, mode: blockdecode.Hybrid}
	if tok != nil {
		st.watch = tok.Watch()
	}
	return st
}

// outputRows returns n output rows of k ids and nWatch watched probabilities.
func (st *stepper) outputRows(n, k, nWatch int) []engine.StepRow {
	if len(st.rows) < n || st.rowsK != k || st.rowsW != nWatch {
		st.rows, st.rowsK, st.rowsW = engine.NewStepRows(max(n, len(st.rows)), k, nWatch), k, nWatch
	}
	return st.rows[:n]
}

// start runs vision and the prefill step for p in the free slot. An AR sequence gets its
// first token from the prefill's output row; a hybrid one's prefill outputs nothing, as its
// first step reads a block after the prompt's last token, which the cache then holds.
func (st *stepper) start(b engine.Backend, p *engine.Prepared, slot int) (*engine.Sequence, error) {
	if p.MaxNewTokens < 1 {
		return nil, fmt.Errorf("token budget %d: need at least 1", p.MaxNewTokens)
	}
	if len(p.PromptIDs) == 0 {
		return nil, fmt.Errorf("an empty prompt")
	}
	s := &engine.Sequence{Prepared: p, Slot: slot, Mode: cmp.Or(p.GenerationMode, engine.GenerationAR), LargestBatch: 1,
		Tokens: make([]int32, 0, p.MaxNewTokens), Probs: make([]float32, 0, p.MaxNewTokens)}
	hybrid := s.Mode == engine.GenerationHybrid
	if hybrid && st.tok == nil {
		return nil, errNoHybrid
	}
	t0 := time.Now()
	if err := b.Vision(p.Patches, p.GridH, p.GridW); err != nil {
		return nil, fmt.Errorf("vision on a %dx%d grid: %w", p.GridH, p.GridW, err)
	}
	s.Vision = time.Since(t0)

	st.slots = append(st.slots[:0], engine.StepSlot{Slot: slot, Pending: p.PromptIDs, NoOutput: hybrid})
	defer clear(st.slots) // it holds the prompt
	// The greedy row always carries the token's probability: the answer's scores are made
	// of them (docs/scores.md, "Cost").
	rows := st.outputRows(engine.StepRows(st.slots), 1, 0)
	t1 := time.Now()
	if err := b.Step(st.slots, 1, nil, rows); err != nil {
		return nil, fmt.Errorf("prefill of %d tokens: %w", len(p.PromptIDs), err)
	}
	s.Prefill = time.Since(t1)
	if !hybrid {
		accept(s, rows[0].TopIDs[0], rows[0].TopProbs[0], st.eos)
	}
	return s, nil
}

// step advances every sequence in seqs (none done, distinct slots) by one step: the AR ones
// by one token in one greedy Step call, the hybrid ones together in one Step call that
// reads the acceptance rules' top ids and watched probabilities.
func (st *stepper) step(b engine.Backend, seqs []*engine.Sequence) error {
	ar, hy := st.ar[:0], st.hy[:0]
	defer func() { clear(ar); clear(hy) }()
	for _, s := range seqs {
		if s.Done {
			return fmt.Errorf("slot %d: the sequence is done", s.Slot)
		}
		if s.Mode == engine.GenerationHybrid {
			hy = append(hy, s)
		} else {
			ar = append(ar, s)
		}
	}
	st.ar, st.hy = ar, hy
	if len(ar) > 0 {
		if err := st.stepAR(b, ar); err != nil {
			return err
		}
	}
	if len(hy) > 0 {
		return st.stepHybrid(b, hy)
	}
	return nil
}

// stepAR appends each sequence's last token to its slot and reads the greedy next one.
func (st *stepper) stepAR(b engine.Backend, seqs []*engine.Sequence) error {
	st.slots = st.slots[:0]
	for _, s := range seqs {
		st.slots = append(st.slots, engine.StepSlot{Slot: s.Slot, Pending: s.Tokens[len(s.Tokens)-1:]})
	}
	defer clear(st.slots)
	rows := st.outputRows(len(seqs), 1, 0)
	t0 := time.Now()
	if err := b.Step(st.slots, 1, nil, rows); err != nil {
		return fmt.Errorf("decode step of %d sequences: %w", len(seqs), err)
	}
	took := time.Since(t0)
	for i, s := range seqs {
		s.Decode += took
		s.DecodeSteps++
		s.LargestBatch = max(s.LargestBatch, len(seqs))
		accept(s, rows[i].TopIDs[0], rows[i].TopProbs[0], st.eos)
	}
	return nil
}

// accept appends a generated token and its probability and marks the sequence done on EOS
// or a spent budget.
func accept(s *engine.Sequence, tok int32, prob float32, eos int32) {
	s.Tokens = append(s.Tokens, tok)
	s.Probs = append(s.Probs, prob)
	if tok == eos {
		s.Done, s.StoppedOnEOS = true, true
	} else if len(s.Tokens) >= s.Prepared.MaxNewTokens {
		s.Done = true
	}
}

// Greedy runs one AR request alone in the free slot: vision, prefill and the decode loop.
// It stops on eos, when the budget is spent, or when ctx is cancelled (checked before
// vision and between decode steps; the returned error then wraps ctx.Err()). The slot is
// released afterwards whatever happened, so the next request starts clean. A hybrid
// request is refused: it needs the model's block token ids (Pipeline.Generate).
func Greedy(ctx context.Context, b engine.Backend, p *engine.Prepared, slot int, eos int32) (*engine.Sequence, error) {
	return newStepper(eos, nil).alone(ctx, b, p, slot)
}

// alone runs one sequence from start to done, one step at a time, and releases its slot
// afterwards whatever happened; Greedy's rules, in the sequence's own mode.
func (st *stepper) alone(ctx context.Context, b engine.Backend, p *engine.Prepared, slot int) (s *engine.Sequence, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("before vision: %w", err)
	}
	defer func() {
		if rerr := b.Release(slot); rerr != nil && err == nil {
			s, err = nil, fmt.Errorf("releasing the %s backend's slot: %w", b.Name(), rerr)
		}
	}()
	if s, err = st.start(b, p, slot); err != nil {
		return nil, err
	}
	one := []*engine.Sequence{s}
	for !s.Done {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("after %d generated tokens: %w", len(s.Tokens), err)
		}
		if err := st.step(b, one); err != nil {
			return nil, err
		}
	}
	return s, nil
}
