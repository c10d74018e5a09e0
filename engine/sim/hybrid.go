package sim

import (
	"fmt"
	"slices"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/tokenizer"
)

// Parallel box decoding on the simulated chip (docs/sim.md, "Hybrid mode"): the model
// answers as one trained for it would. The answer is the one planned for AR mode, read a
// unit at a time (a label <ref>..</ref>, a box, a point, a negative <box>None</box>, the
// end): block row i predicts the planned token i after the committed ones while they stay
// in the unit, <null> after it, each with a distribution the acceptance rules read as
// meant. One box in fallbackEvery hesitates between two far-apart places on one
// coordinate, so the rules cut it and the host finishes it one token at a time, as they do
// with a real model's doubtful boxes.

// fallbackEvery: one box block in this many (chosen by a hash of the image and the box's
// place in the answer) is read as doubtful and finished one token at a time. The
// block-trained test model fell back on 31 of 109 box blocks (docs/hybrid-decoding.md);
// a well-trained one should do better, and one in eight keeps the fallback path busy
// under load without making it the common case.
const fallbackEvery = 8

// blockTokens are the ids a hybrid answer is read with, from the tokenizer; nil when it
// lacks one (a checkpoint without parallel box decoding).
func blockTokens(tok *tokenizer.Tokenizer, eos int32) (*blockdecode.Tokens, error) {
	t := &blockdecode.Tokens{IMEnd: eos}
	for _, n := range []struct {
		name string
		id   *int32
	}{
		{"<box>", &t.BoxStart}, {"</box>", &t.BoxEnd}, {"<ref>", &t.RefStart}, {"</ref>", &t.RefEnd},
		{"<0>", &t.CoordStart}, {"<1000>", &t.CoordEnd}, {"None", &t.None}, {"<null>", &t.Null},
		{"<text_mask>", &t.TextMask},
	} {
		id, ok := tok.ID(n.name)
		if !ok {
			return nil, fmt.Errorf("the tokenizer has no %s token", n.name)
		}
		*n.id = id
	}
	if t.CoordEnd-t.CoordStart != 1000 {
		return nil, fmt.Errorf("coordinate tokens <0>..<1000> are ids %d..%d, not 1001 in a row", t.CoordStart, t.CoordEnd)
	}
	return t, nil
}

// planned is the answer's token at index i: past the end, more EOS (a host that ignored
// EOS gets more of it).
func (s *slot) planned(i int, eos int32) int32 {
	if i < len(s.plan) {
		return s.plan[i]
	}
	return eos
}

// unitEnd is the index of the last token of the answer unit that index i is in: a unit
// ends with </ref>, </box> or EOS (docs/hybrid-decoding.md, "Training layout").
func (s *slot) unitEnd(i int, t *blockdecode.Tokens) int {
	for ; i < len(s.plan); i++ {
		if tok := s.plan[i]; tok == t.RefEnd || tok == t.BoxEnd || tok == t.IMEnd {
			return i
		}
	}
	return i // past the plan: the EOS there is a unit of its own
}

// doubtfulRow is the block row (1..4) that hesitates when the block at answer index i is
// a box the model finishes one token at a time, or -1.
func (b *Backend) doubtfulRow(s *slot, i int) int {
	t := b.block
	if s.planned(i, b.o.EOS) != t.BoxStart || i+5 >= len(s.plan) || s.plan[i+5] != t.BoxEnd ||
		slices.ContainsFunc(s.plan[i+1:i+5], func(id int32) bool { return !t.IsCoord(id) }) {
		return -1 // not a four-coordinate box: points and negatives are always read whole
	}
	r := rng{state: s.image ^ uint64(i)*0x9e3779b97f4a7c15 ^ 0x5851f42d4c957f2d}
	if r.next()%fallbackEvery != 0 {
		return -1
	}
	return 1 + int(r.next()%4)
}

// answerRow writes the row predicting answer index i (<null> when padding is true): the
// planned token with the probability AR decoding gives it, and the rest of the mass on two
// runners-up that change no reading: a coordinate's neighbours (a spread of at most two
// ids, so never abnormal), or for any other token two ids that are neither coordinates
// nor it (so a row whose target is not a coordinate has none in its top ids).
func (b *Backend) answerRow(s *slot, i int, padding bool, k int, watch []int32, row engine.StepRow) {
	t := b.block
	tok := s.planned(i, b.o.EOS)
	if padding {
		tok = t.Null
	}
	p := tokenProb(s.image, i, tok)
	var others [2]int32
	switch {
	case t.IsCoord(tok) && tok == t.CoordStart:
		others = [2]int32{tok + 1, tok + 2}
	case t.IsCoord(tok) && tok == t.CoordEnd:
		others = [2]int32{tok - 1, tok - 2}
	case t.IsCoord(tok):
		others = [2]int32{tok - 1, tok + 1}
	default:
		n := 0
		for _, o := range []int32{t.Null, t.IMEnd, t.TextMask} {
			if o != tok && n < 2 {
				others[n] = o
				n++
			}
		}
	}
	rest := 1 - p
	writeRow(row, k, watch, []idProb{{tok, p}, {others[0], rest * 2 / 3}, {others[1], rest - rest*2/3}})
}

// hesitate rewrites the row of a doubtful box's coordinate at answer index i: the planned
// coordinate at 0.6 and one more than 60 ids away at 0.3, which the box reading calls
// abnormal (a probability under 0.9, two coordinates in the top 4 spread over more than
// 60): the box is cut before it and finished one token at a time.
func (b *Backend) hesitate(s *slot, i int, k int, watch []int32, row engine.StepRow) {
	t := b.block
	c := s.planned(i, b.o.EOS)
	far := c + 200
	if far > t.CoordEnd {
		far = c - 200
	}
	writeRow(row, k, watch, []idProb{{c, 0.6}, {far, 0.3}, {t.Null, 0.1}})
}

type idProb struct {
	id int32
	p  float32
}

// writeRow writes a row whose probability mass is on ps (every other id has 0): its top k
// by probability, equal ones in ascending id order (the ids of no mass from 0 up), and the
// watched ids' probabilities.
func writeRow(row engine.StepRow, k int, watch []int32, ps []idProb) {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b idProb) int {
		if a.p != b.p {
			if a.p > b.p {
				return -1
			}
			return 1
		}
		return int(a.id - b.id)
	})
	next := int32(0) // the next id of no mass
	for j := range k {
		if j < len(ps) && ps[j].p > 0 {
			row.TopIDs[j], row.TopProbs[j] = ps[j].id, ps[j].p
			continue
		}
		for slices.ContainsFunc(ps, func(q idProb) bool { return q.id == next && q.p > 0 }) {
			next++
		}
		row.TopIDs[j], row.TopProbs[j] = next, 0
		next++
	}
	for j, w := range watch {
		row.Watch[j] = 0
		for _, q := range ps {
			if q.id == w {
				row.Watch[j] = q.p
			}
		}
	}
}
