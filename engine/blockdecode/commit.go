package blockdecode

import (
	"fmt"

	"github.com/locateanything/detect/engine"
)

// Type names what a step committed: handle_pattern's types for a block step, the kinds of
// ClassifyAR for a one-token step.
type Type string

const (
	TypeIMEnd     Type = "im_end"     // the end (a block: <|im_end|> committed; hybrid AR: any token but a box's)
	TypeEmptyBox  Type = "empty_box"  // <box> None </box>
	TypeCoordBox  Type = "coord_box"  // a whole box (fast mode: any block starting with <box>)
	TypePointBox  Type = "point_box"  // <box> x y </box>
	TypeErrorBox  Type = "error_box"  // hybrid: <box> and the clean coordinates, then one token per step
	TypeRefObject Type = "ref_object" // text, up to the first <null>
	TypeBoxEndAR  Type = "box_end_ar" // hybrid AR: </box>, back to blocks
	TypeCoordAR   Type = "coord_ar"   // hybrid AR: a coordinate or None, one more token step
	TypeAR        Type = "continue_ar"
)

// Pattern is what a block commits (upstream handle_pattern).
type Pattern struct {
	Type     Type
	Tokens   []int32 // a prefix of the new tokens, or <|im_end|> alone
	ToAR     bool    // hybrid: continue one token per step
	Terminal bool    // stop generating
}

// HandlePattern reads a block's new tokens x.
func HandlePattern(x [Size]int32, t *Tokens, mode Mode) Pattern {
	switch {
	case x[0] == t.Null || x[0] == t.IMEnd:
		return Pattern{Type: TypeIMEnd, Tokens: []int32{t.IMEnd}, Terminal: true}
	case x[0] == t.BoxStart && x[1] == t.None:
		return Pattern{Type: TypeEmptyBox, Tokens: []int32{t.BoxStart, t.None, t.BoxEnd}}
	case x[0] == t.BoxStart:
		n := 1 // the first non-coordinate among x[1..4]
		for n < 5 && t.IsCoord(x[n]) {
			n++
		}
		switch {
		case n == 5 && x[5] == t.BoxEnd:
			return Pattern{Type: TypeCoordBox, Tokens: x[:]}
		case n == 3 && x[3] == t.BoxEnd:
			return Pattern{Type: TypePointBox, Tokens: x[:4]}
		case mode == Fast:
			return Pattern{Type: TypeCoordBox, Tokens: x[:]}
		}
		return Pattern{Type: TypeErrorBox, Tokens: x[:n], ToAR: true}
	}
	// Text: cut at the first <null>; of two trailing </ref>, keep one.
	out := x[:]
	for i, id := range out {
		if id == t.Null {
			out = out[:i]
			break
		}
	}
	if n := len(out); n >= 2 && out[n-1] == t.RefEnd && out[n-2] == t.RefEnd {
		out = out[:n-1]
	}
	return Pattern{Type: TypeRefObject, Tokens: out}
}

// ClassifyAR is the kind of a one-token step's token (upstream _sample_token_in_ar). In
// hybrid mode a one-token step only finishes a box: </box> returns to blocks, a coordinate
// or None continues, anything else ends generation (and is committed first). Otherwise
// every token but <|im_end|> continues.
func ClassifyAR(tok int32, t *Tokens, mode Mode) Type {
	if mode == Hybrid {
		switch {
		case tok == t.BoxEnd:
			return TypeBoxEndAR
		case t.IsCoord(tok) || tok == t.None:
			return TypeCoordAR
		}
		return TypeIMEnd
	}
	if tok == t.IMEnd {
		return TypeIMEnd
	}
	return TypeAR
}

// Decision is one step's outcome after the stop rules.
type Decision struct {
	Type    Type
	Reading *Reading  // a block step's reading; nil for a one-token step
	Commit  []int32   // the tokens to append (at least one)
	Probs   []float32 // each committed token's probability, from the row that predicted it
	// CutFrom is what the pattern committed before a stop rule shortened it (nil if not).
	CutFrom  []int32
	ToAR     bool // hybrid: the next step is a one-token step
	ToBlocks bool // hybrid: the next step reads a block again
	Stop     bool // generation ends here (the end, or <|im_end|> committed); a spent budget is the caller's
}

// Block decides a block step: rows are the block's six output rows, left (>= 1) the
// tokens the budget still allows. The stop rules: the commit is cut after its first
// <|im_end|>, which stops generation, and to left tokens.
func Block(rows []engine.StepRow, t *Tokens, mode Mode, left int) (Decision, error) {
	if mode != Hybrid && mode != Fast {
		return Decision{}, fmt.Errorf("block step in mode %q", mode)
	}
	rd, err := Read(rows, t, mode)
	if err != nil {
		return Decision{}, err
	}
	p := HandlePattern(rd.NewTokens, t, mode)
	d := Decision{Type: p.Type, Reading: &rd, ToAR: mode == Hybrid && p.ToAR, Stop: p.Terminal}
	d.Commit, d.CutFrom = cut(p.Tokens, t, left, &d.Stop)
	// Committed token i was predicted by row i: every commit is a prefix of the new tokens,
	// except the end block's <|im_end|>, which row 0 predicts too.
	d.Probs = make([]float32, len(d.Commit))
	for i, id := range d.Commit {
		d.Probs[i] = t.Prob(rows[i], id)
	}
	return d, nil
}

// AR decides a one-token step from its output row: the most probable id is committed.
func AR(row engine.StepRow, t *Tokens, mode Mode, left int) (Decision, error) {
	if err := checkRows([]engine.StepRow{row}, 1); err != nil {
		return Decision{}, fmt.Errorf("reading a one-token step: %w", err)
	}
	tok := row.TopIDs[0]
	kind := ClassifyAR(tok, t, mode)
	d := Decision{Type: kind, ToBlocks: kind == TypeBoxEndAR, Stop: kind == TypeIMEnd}
	d.Commit, d.CutFrom = cut([]int32{tok}, t, left, &d.Stop)
	d.Probs = []float32{row.TopProbs[0]}
	return d, nil
}

// cut applies the stop rules to what a step commits.
func cut(commit []int32, t *Tokens, left int, stop *bool) (out, from []int32) {
	out = commit
	for i, id := range out {
		if id == t.IMEnd {
			out, *stop = out[:i+1], true
			break
		}
	}
	out = out[:min(len(out), max(left, 1))]
	if len(out) != len(commit) {
		from = commit
	}
	return out, from
}
