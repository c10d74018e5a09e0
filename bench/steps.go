package bench

import (
	"github.com/locateanything/detect/engine"
)

// greedy drives the backend's one entry point, Step, the way the service's AR decoding
// does: a prefill is a step on a free slot with the prompt pending, a decode step one
// pending token per slot; each output row is the greedy token with its probability.
type greedy struct {
	slots []engine.StepSlot
	rows  []engine.StepRow
}

// prefill runs ids into the free slot and returns the first token.
func (g *greedy) prefill(b engine.Backend, slot int, ids []int32) (int32, error) {
	g.slots = append(g.slots[:0], engine.StepSlot{Slot: slot, Pending: ids})
	rows := g.outputRows(1)
	if err := b.Step(g.slots, 1, nil, rows); err != nil {
		return 0, err
	}
	return rows[0].TopIDs[0], nil
}

// decode appends toks[i] to slots[i] and writes each slot's next token to next[i].
func (g *greedy) decode(b engine.Backend, slots []int, toks, next []int32) error {
	g.slots = g.slots[:0]
	for i, s := range slots {
		g.slots = append(g.slots, engine.StepSlot{Slot: s, Pending: toks[i : i+1 : i+1]})
	}
	rows := g.outputRows(len(slots))
	if err := b.Step(g.slots, 1, nil, rows); err != nil {
		return err
	}
	for i, r := range rows {
		next[i] = r.TopIDs[0]
	}
	return nil
}

func (g *greedy) outputRows(n int) []engine.StepRow {
	if len(g.rows) < n {
		g.rows = engine.NewStepRows(n, 1, 0)
	}
	return g.rows[:n]
}
