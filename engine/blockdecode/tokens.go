package blockdecode

import (
	"fmt"

	"github.com/locateanything/detect/engine"
)

// Size is the number of rows in a block: the last committed token and five <text_mask>
// slots. The reading below is written for exactly six (a box is <box>, four coordinates
// and </box>), as upstream's is.
const Size = 6

// K is the number of most probable ids a Step must return for every output row: the label
// reading looks at a row's top 5, the box reading at its top 4, the argmax at its top 1.
const K = labelTopK

// Tokens are the ids the rules read, from the checkpoint's config.json (docs/hybrid-decoding.md,
// "Tokens").
type Tokens struct {
	BoxStart, BoxEnd     int32 // <box>, </box>
	RefStart, RefEnd     int32 // <ref>, </ref>
	CoordStart, CoordEnd int32 // <0> and <1000>: every id between them is a coordinate
	None                 int32 // "None": nothing found
	Null                 int32 // <null>: padding inside a block
	IMEnd                int32 // <|im_end|>: the end
	TextMask             int32 // <text_mask>: a block's slots 1-5
}

// Validate checks that every id lies in a vocabulary of vocab ids and that the coordinate
// range is not empty.
func (t *Tokens) Validate(vocab int) error {
	for _, id := range []struct {
		name string
		id   int32
	}{
		{"box start", t.BoxStart}, {"box end", t.BoxEnd}, {"ref start", t.RefStart}, {"ref end", t.RefEnd},
		{"coordinate start", t.CoordStart}, {"coordinate end", t.CoordEnd}, {"none", t.None},
		{"null", t.Null}, {"im_end", t.IMEnd}, {"text mask", t.TextMask},
	} {
		if id.id < 0 || int(id.id) >= vocab {
			return fmt.Errorf("%s token %d is outside the vocabulary [0, %d)", id.name, id.id, vocab)
		}
	}
	if t.CoordEnd < t.CoordStart {
		return fmt.Errorf("coordinate tokens %d..%d: the range is empty", t.CoordStart, t.CoordEnd)
	}
	return nil
}

// IsCoord reports whether id is one of the 1001 coordinate tokens.
func (t *Tokens) IsCoord(id int32) bool { return t.CoordStart <= id && id <= t.CoordEnd }

// The watched ids, in the order Watch lists them: every probability the rules read by id
// rather than by rank.
const (
	watchBoxStart = iota
	watchRefStart
	watchNone
	watchBoxEnd
	watchNull
	watchIMEnd
	nWatch
)

// Watch is the watch list a Step must be given for the rules to read its rows: the
// probabilities of <box>, <ref>, None, </box>, <null> and <|im_end|>, in that order.
func (t *Tokens) Watch() []int32 {
	w := make([]int32, nWatch)
	w[watchBoxStart], w[watchRefStart], w[watchNone] = t.BoxStart, t.RefStart, t.None
	w[watchBoxEnd], w[watchNull], w[watchIMEnd] = t.BoxEnd, t.Null, t.IMEnd
	return w
}

// Prob is the probability of id in a row read with Watch: from the top ids or the
// watched ones, 0 when the row holds neither (then id was not among the row's most
// probable, and no rule commits such an id).
func (t *Tokens) Prob(r engine.StepRow, id int32) float32 {
	for i, top := range r.TopIDs {
		if top == id {
			return r.TopProbs[i]
		}
	}
	for i, w := range [nWatch]int32{t.BoxStart, t.RefStart, t.None, t.BoxEnd, t.Null, t.IMEnd} {
		if w == id && i < len(r.Watch) {
			return r.Watch[i]
		}
	}
	return 0
}

// checkRows says why rows cannot be read, or nil.
func checkRows(rows []engine.StepRow, want int) error {
	if len(rows) != want {
		return fmt.Errorf("%d rows, want %d", len(rows), want)
	}
	for i, r := range rows {
		if len(r.TopIDs) < K || len(r.TopProbs) != len(r.TopIDs) || len(r.Watch) != nWatch {
			return fmt.Errorf("row %d has %d top ids, %d probabilities and %d watched; want at least %d, as many, and %d",
				i, len(r.TopIDs), len(r.TopProbs), len(r.Watch), K, nWatch)
		}
	}
	return nil
}
