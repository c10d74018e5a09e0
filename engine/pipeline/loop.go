package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/locateanything/detect/engine"
)

// start runs vision and prefill for p in the free slot and returns the sequence with its
// first token.
func start(b engine.Backend, p *engine.Prepared, slot int, eos int32) (*engine.Sequence, error) {
	s, err := visionFor(b, p, slot)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	// Always ask for the token's probability: the answer's scores are made of them, and
	// the softmax sum costs one pass over the vocabulary per token (docs/scores.md, "Cost").
	tok, prob, err := b.Prefill(slot, p.PromptIDs, true)
	if err != nil {
		return nil, fmt.Errorf("prefill of %d tokens: %w", len(p.PromptIDs), err)
	}
	s.Prefill = time.Since(t1)
	accept(s, tok, prob, eos)
	return s, nil
}

// visionFor makes the sequence for p in slot and runs its vision tower.
func visionFor(b engine.Backend, p *engine.Prepared, slot int) (*engine.Sequence, error) {
	if p.MaxNewTokens < 1 {
		return nil, fmt.Errorf("token budget %d: need at least 1", p.MaxNewTokens)
	}
	s := &engine.Sequence{Prepared: p, Slot: slot, Mode: cmp.Or(p.GenerationMode, engine.GenerationAR), MaxBatch: 1,
		Tokens: make([]int32, 0, p.MaxNewTokens), Probs: make([]float32, 0, p.MaxNewTokens)}
	t0 := time.Now()
	if err := b.Vision(p.Patches, p.GridH, p.GridW); err != nil {
		return nil, fmt.Errorf("vision on a %dx%d grid: %w", p.GridH, p.GridW, err)
	}
	s.Vision = time.Since(t0)
	return s, nil
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

// stepper runs batched decode steps, reusing its argument slices.
type stepper struct {
	eos          int32
	slots        []int
	tokens, next []int32
	probs        []float32
}

// step advances every sequence in seqs (none done, distinct slots) by one token in one
// backend call.
func (st *stepper) step(b engine.Backend, seqs []*engine.Sequence) error {
	n := len(seqs)
	st.slots, st.tokens, st.next, st.probs = st.slots[:0], st.tokens[:0], st.next[:0], st.probs[:0]
	for _, s := range seqs {
		if s.Done {
			return fmt.Errorf("slot %d: the sequence is done", s.Slot)
		}
		st.slots = append(st.slots, s.Slot)
		st.tokens = append(st.tokens, s.Tokens[len(s.Tokens)-1])
		st.next = append(st.next, 0)
		st.probs = append(st.probs, 0)
	}
	t0 := time.Now()
	if err := b.Decode(st.slots, st.tokens, st.next, st.probs); err != nil {
		return fmt.Errorf("decode step of %d sequences: %w", n, err)
	}
	took := time.Since(t0)
	for i, s := range seqs {
		s.Decode += took
		s.DecodeSteps++
		s.MaxBatch = max(s.MaxBatch, n)
		accept(s, st.next[i], st.probs[i], st.eos)
	}
	return nil
}

// Greedy runs one request alone in the free slot: vision, prefill and the decode loop. It stops on
// eos, when the budget is spent, or when ctx is cancelled (checked before vision and
// between decode steps; the returned error then wraps ctx.Err()). The slot is released
// afterwards whatever happened, so the next request starts clean.
func Greedy(ctx context.Context, b engine.Backend, p *engine.Prepared, slot int, eos int32) (*engine.Sequence, error) {
	st := &stepper{eos: eos}
	return alone(ctx, b, p, slot, func() (*engine.Sequence, error) { return start(b, p, slot, eos) }, st.step)
}

// alone runs one sequence from start to done, one step at a time, and releases its slot
// afterwards whatever happened; Greedy's rules.
func alone(ctx context.Context, b engine.Backend, p *engine.Prepared, slot int, begin func() (*engine.Sequence, error),
	step func(engine.Backend, []*engine.Sequence) error) (s *engine.Sequence, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("before vision: %w", err)
	}
	defer func() {
		if rerr := b.Release(slot); rerr != nil && err == nil {
			s, err = nil, fmt.Errorf("releasing the %s backend's slot: %w", b.Name(), rerr)
		}
	}()
	if s, err = begin(); err != nil {
		return nil, err
	}
	one := []*engine.Sequence{s}
	for !s.Done {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("after %d generated tokens: %w", len(s.Tokens), err)
		}
		if err := step(b, one); err != nil {
			return nil, err
		}
	}
	return s, nil
}
