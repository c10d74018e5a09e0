package pipeline

import (
	"fmt"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
)

// DecodeModeHybrid is what a hybrid answer's DecodeMode says.
const DecodeModeHybrid = "hybrid_greedy"

// stepHybrid advances every hybrid sequence in seqs by one step in one backend call: the
// ones reading blocks by a block after their pending tokens, the ones finishing a box one
// token at a time by their pending tokens' next-token row.
func (st *stepper) stepHybrid(b engine.Backend, seqs []*engine.Sequence) error {
	if st.tok == nil {
		return errNoHybrid
	}
	n := len(seqs)
	need := 0
	for _, s := range seqs {
		if s.Pending > len(s.Tokens) || (s.OneToken && s.Pending < 1) {
			return fmt.Errorf("slot %d: %d pending of %d generated tokens in %s", s.Slot, s.Pending, len(s.Tokens), phase(s))
		}
		if !s.OneToken {
			need += blockdecode.Size
		}
	}
	if cap(st.blocks) < need {
		st.blocks = make([]int32, 0, need)
	}
	blocks := st.blocks[:0]
	st.slots = st.slots[:0]
	for _, s := range seqs {
		slot := engine.StepSlot{Slot: s.Slot, Pending: s.Tokens[len(s.Tokens)-s.Pending:]}
		if !s.OneToken {
			// [last committed token, <text_mask> x 5]: row i predicts the token i after it.
			at := len(blocks)
			blocks = append(blocks, lastCommitted(s))
			for range blockdecode.Size - 1 {
				blocks = append(blocks, st.tok.TextMask)
			}
			slot.Block = blocks[at:len(blocks):len(blocks)]
		}
		st.slots = append(st.slots, slot)
	}
	defer clear(st.slots) // they hold the sequences' token slices
	rows := st.outputRows(engine.StepRows(st.slots), blockdecode.K, len(st.watch))
	t0 := time.Now()
	if err := b.Step(st.slots, blockdecode.K, st.watch, rows); err != nil {
		return fmt.Errorf("hybrid step of %d sequences: %w", n, err)
	}
	took := time.Since(t0)
	r := 0
	for _, s := range seqs {
		left := s.Prepared.MaxNewTokens - len(s.Tokens)
		var d blockdecode.Decision
		var err error
		if s.OneToken {
			d, err = blockdecode.AR(rows[r], st.tok, st.mode, left)
			r++
		} else {
			d, err = blockdecode.Block(rows[r:r+blockdecode.Size], st.tok, st.mode, left)
			r += blockdecode.Size
		}
		if err != nil {
			return fmt.Errorf("slot %d: %w", s.Slot, err)
		}
		s.Decode += took
		s.DecodeSteps++
		s.LargestBatch = max(s.LargestBatch, n)
		commit(s, d, st.tok.IMEnd)
	}
	return nil
}

// lastCommitted is the sequence's last committed token: its last generated one, or the
// prompt's last before any.
func lastCommitted(s *engine.Sequence) int32 {
	if len(s.Tokens) > 0 {
		return s.Tokens[len(s.Tokens)-1]
	}
	return s.Prepared.PromptIDs[len(s.Prepared.PromptIDs)-1]
}

func phase(s *engine.Sequence) string {
	if s.OneToken {
		return "one-token mode"
	}
	return "block mode"
}

// commit appends what a step decided, switches the sequence's mode when told, and marks
// it done when a stop rule says so or the budget is spent.
func commit(s *engine.Sequence, d blockdecode.Decision, eos int32) {
	s.Tokens = append(s.Tokens, d.Commit...)
	s.Probs = append(s.Probs, d.Probs...)
	s.Pending = len(d.Commit)
	switch {
	case d.ToAR:
		s.OneToken = true
	case d.ToBlocks:
		s.OneToken = false
	}
	switch {
	case d.Stop:
		s.Done, s.StoppedOnEOS = true, s.Tokens[len(s.Tokens)-1] == eos
	case len(s.Tokens) >= s.Prepared.MaxNewTokens:
		s.Done = true
	}
}
