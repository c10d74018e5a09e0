package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/locateanything/detect/engine"
)

// Step runs one step for every slot in slots (engine.Backend): a free slot's prefill (its
// prompt pending), AR rows (one pending token, the next-token row) and hybrid blocks. A
// prefill takes the prefill cost of its padded prompt. The live slots' rows take the cost
// of one decode step of MaxBatch rows when every one is a greedy AR row (the chip's traced
// decode runs the batch it was built for, idle rows included), and otherwise the cost of
// one forward over all their rows (Costs.HybridStepCost).
func (b *Backend) Step(slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow) error {
	if b.closed {
		return ErrClosed
	}
	forward, err := b.checkStep(slots, k, watch, rows)
	if err != nil {
		return err
	}
	// Prefills first: each takes its own cost, and its slot then predicts the answer's
	// first token from the prompt it holds.
	fresh := b.fresh[:0]
	live, greedy := 0, k == 1 && len(watch) == 0
	for _, ss := range slots {
		prefill := !b.slots[ss.Slot].live
		fresh = append(fresh, prefill)
		if prefill {
			b.prefill(ss.Slot, ss.Pending)
			continue
		}
		live++
		greedy = greedy && len(ss.Block) == 0 && len(ss.Pending) == 1 && !ss.NoOutput
	}
	b.fresh = fresh
	var cost time.Duration
	switch {
	case live > 0 && greedy:
		cost = b.o.Costs.StepCost(len(b.slots))
	case live > 0:
		cost = b.o.Costs.HybridStepCost(forward, len(b.slots))
	}
	step := b.clock.begin(cost)
	r := 0
	for i, ss := range slots {
		s := &b.slots[ss.Slot]
		if !fresh[i] {
			s.pos += len(ss.Pending)
			s.next += len(ss.Pending) // the answer index of position L', the first row's target
		}
		switch {
		case len(ss.Block) == 0 && ss.NoOutput:
		case len(ss.Block) == 0:
			b.answerRow(s, s.next, false, k, watch, rows[r])
			r++
		default:
			end := s.unitEnd(s.next, b.block)
			doubtful := b.doubtfulRow(s, s.next)
			for j := range ss.Block {
				b.answerRow(s, s.next+j, s.next+j > end, k, watch, rows[r])
				if j == doubtful {
					b.hesitate(s, s.next+j, k, watch, rows[r])
				}
				r++
			}
		}
	}
	late := b.clock.end(step, cost)
	switch {
	case live > 0 && greedy:
		b.o.Meter.record(cost, late, 0, live)
	case live > 0:
		b.o.Meter.recordStep(cost, late, live, forward)
	}
	return nil
}

// checkStep refuses a step the chip would refuse (engine.Backend.Step's rules), a slot fed
// other tokens than its answer, and a block on a tokenizer without parallel box decoding,
// before anything changes; it returns the rows the live slots run (their pending and block
// rows).
func (b *Backend) checkStep(slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow) (int, error) {
	n := len(slots)
	if n < 1 || n > len(b.slots) || k < 1 || k > engine.StepMaxK || len(watch) > engine.StepMaxWatch {
		return 0, fmt.Errorf("sim: step: %d slots (1..%d), k %d (1..%d), %d watched ids (at most %d)",
			n, len(b.slots), k, engine.StepMaxK, len(watch), engine.StepMaxWatch)
	}
	if want := engine.StepRows(slots); len(rows) != want {
		return 0, fmt.Errorf("sim: step: %d output rows given, the slots make %d", len(rows), want)
	}
	for i, r := range rows {
		if len(r.TopIDs) != k || len(r.TopProbs) != k || len(r.Watch) != len(watch) {
			return 0, fmt.Errorf("sim: step: output row %d has %d ids, %d probabilities and %d watched; want %d, %d, %d",
				i, len(r.TopIDs), len(r.TopProbs), len(r.Watch), k, k, len(watch))
		}
	}
	forward, prefill := 0, -1
	for i, ss := range slots {
		if ss.Slot < 0 || ss.Slot >= len(b.slots) {
			return 0, fmt.Errorf("sim: step: slot %d out of range 0..%d", ss.Slot, len(b.slots)-1)
		}
		for _, other := range slots[:i] {
			if other.Slot == ss.Slot {
				return 0, fmt.Errorf("sim: step: slot %d appears twice", ss.Slot)
			}
		}
		if len(ss.Block) > 0 && b.block == nil {
			return 0, fmt.Errorf("sim: step: slot %d: a block, but no parallel box decoding with this tokenizer: %w", ss.Slot, b.noBlock)
		}
		s := &b.slots[ss.Slot]
		if !s.live {
			switch {
			case prefill >= 0:
				return 0, fmt.Errorf("sim: step: slots %d and %d are both free: one prefill per step, as each takes the image vision kept",
					prefill, ss.Slot)
			case len(ss.Block) > 0:
				return 0, fmt.Errorf("sim: step: slot %d is free: its prefill takes no block", ss.Slot)
			}
			if err := b.checkPrefill(ss.Slot, ss.Pending); err != nil {
				return 0, err
			}
			prefill = ss.Slot
			continue
		}
		np, nb := len(ss.Pending), len(ss.Block)
		held := s.pos + np // L'
		switch {
		case np+nb > engine.StepMaxRows || (nb == 0 && np == 0):
			return 0, fmt.Errorf("sim: step: slot %d: %d pending and %d block tokens (1..%d in all, a row without a block needs a pending token)",
				ss.Slot, np, nb, engine.StepMaxRows)
		case held > b.o.MaxSeqLen || held-1+nb > b.o.MaxSeqLen:
			return 0, fmt.Errorf("sim: step: slot %d is full (%d positions, %d pending, a block of %d)", ss.Slot, s.pos, np, nb)
		}
		if err := checkImageIDs(ss, b.o.ImageToken); err != nil {
			return 0, err
		}
		want := make([]int32, np)
		for j := range want {
			want[j] = s.planned(s.next+j, b.o.EOS)
		}
		if !slices.Equal(ss.Pending, want) {
			return 0, fmt.Errorf("sim: step: slot %d was fed %v, but its answer goes on %v", ss.Slot, ss.Pending, want)
		}
		last := s.lastPrompt
		switch {
		case np > 0:
			last = ss.Pending[np-1]
		case s.next > 0:
			last = s.planned(s.next-1, b.o.EOS)
		}
		if nb > 0 && ss.Block[0] != last {
			return 0, fmt.Errorf("sim: step: slot %d's block starts with %d, not the last committed token %d", ss.Slot, ss.Block[0], last)
		}
		forward += np + nb
	}
	return forward, nil
}

// checkImageIDs refuses the image-context id in a live slot's step (its pending tokens, its
// block): only a free slot's prompt may hold it, as on every backend (images come with a
// prefill).
func checkImageIDs(ss engine.StepSlot, image int32) error {
	for j, id := range ss.Pending {
		if id == image {
			return fmt.Errorf("sim: step: slot %d: pending token %d is the image-context id %d, which only a free slot's prompt may hold (images come with a prefill)",
				ss.Slot, j, id)
		}
	}
	for j, id := range ss.Block {
		if id == image {
			return fmt.Errorf("sim: step: slot %d: block token %d is the image-context id %d, which only a free slot's prompt may hold (images come with a prefill)",
				ss.Slot, j, id)
		}
	}
	return nil
}
