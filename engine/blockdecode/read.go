package blockdecode

import (
	"fmt"

	"github.com/locateanything/detect/engine"
)

// Mode is how blocks are read and committed.
type Mode string

const (
	// Hybrid is upstream's default: a block that starts a box but is not a clean one is cut
	// before its first bad coordinate and decoding finishes the box one token per step.
	Hybrid Mode = "hybrid"
	// Fast reads blocks only: no abnormal-coordinate rule, and a block starting with <box>
	// is committed as it is. It exists for the reference's goldens; the product serves ar and
	// hybrid.
	Fast Mode = "fast"
	// Slow is one token per step throughout (plain greedy decoding); only ClassifyAR reads it.
	Slow Mode = "slow"
)

// Thresholds, upstream's values as float32 constants: upstream compares float32
// probabilities with Python numbers that torch first rounds to float32, so 0.9 means
// float32(0.9) = 0.89999998, and a Go float32 constant is exactly that rounding.
const (
	boxTopK   = 4 // coordinates are looked for among a row's top 4 (upstream's keep_k_avg default)
	labelTopK = 5 // label words among a row's top 5 (decode_ref's default)

	boxStartMin     float32 = 0.7 // row 0 <box>, for an empty box (>=)
	endScoreMin     float32 = 0.2 // row 5 </box> + <null> + <|im_end|>, for a legal frame (>=)
	emptyNoneMin    float32 = 0.2 // row 1 None, for an empty box (>)
	emptyBoxEndMin  float32 = 0.2 // row 2 </box>, for an empty box (>)
	emptyNullMin    float32 = 0.1 // rows 3 and 4 <null>, for an empty box (>)
	refStartMin     float32 = 0.6 // row 0 <ref>, for a label (>=)
	abnormalProbMax float32 = 0.9 // a row's best coordinate below this (<) ...
	abnormalSpread          = 60  // ... with its top-4 coordinates spread over more than this (>)

	// rejected stands for an abnormal coordinate: not a coordinate id, so HandlePattern
	// cuts the box before it.
	rejected int32 = 0
)

// Frame is is_valid_box_frame's verdict on a block.
type Frame string

const (
	FrameEmpty   Frame = "empty_box"   // <box> None </box> <null> <null>
	FrameLegal   Frame = "legal_box"   // row 5 can close a box: look for coordinates
	FrameIllegal Frame = "illegal_box" // not a box
)

// Path is the reading that produced a block's new tokens.
type Path string

const (
	PathEmptyBox Path = "empty_box"
	PathBox      Path = "box"
	PathRef      Path = "ref"
	PathArgmax   Path = "argmax"
)

// Reading is what a block's six rows say (upstream sample_tokens and the choice in
// _sample_token_in_mtp).
type Reading struct {
	X0        [Size]int32 // each row's most probable id
	Frame     Frame
	Path      Path
	NewTokens [Size]int32 // what HandlePattern reads
}

// Read reads a block's rows: the box reading if it succeeds, else the label reading, else
// each row's argmax. rows must come from a Step with at least K top ids and Watch's
// watch list.
func Read(rows []engine.StepRow, t *Tokens, mode Mode) (Reading, error) {
	if err := checkRows(rows, Size); err != nil {
		return Reading{}, fmt.Errorf("reading a block: %w", err)
	}
	var rd Reading
	for r := range rows {
		rd.X0[r] = rows[r].TopIDs[0]
	}
	var ok bool
	rd.Frame = boxFrame(rows)
	if rd.NewTokens, ok = readBox(rows, t, rd.Frame, mode); ok {
		rd.Path = PathBox
		if rd.Frame == FrameEmpty {
			rd.Path = PathEmptyBox
		}
		return rd, nil
	}
	if rd.NewTokens, ok = readLabel(rows, t); ok {
		rd.Path = PathRef
		return rd, nil
	}
	rd.NewTokens, rd.Path = rd.X0, PathArgmax
	return rd, nil
}

// boxFrame is upstream is_valid_box_frame. Nothing asks that row 0 be <box>: a label or
// end block whose last row is <null> is a legal frame too (the row-0 quirk).
func boxFrame(rows []engine.StepRow) Frame {
	if rows[0].Watch[watchBoxStart] >= boxStartMin && rows[1].Watch[watchNone] > emptyNoneMin &&
		rows[2].Watch[watchBoxEnd] > emptyBoxEndMin && rows[3].Watch[watchNull] > emptyNullMin &&
		rows[4].Watch[watchNull] > emptyNullMin {
		return FrameEmpty
	}
	// Summed in this order, each sum rounded to float32, as upstream's tensor sum.
	w := rows[5].Watch
	end := float32(float32(w[watchBoxEnd]+w[watchNull]) + w[watchIMEnd])
	if end >= endScoreMin {
		return FrameLegal
	}
	return FrameIllegal
}

// readBox is upstream decode_bbox_avg: a box from the coordinates in the top 4 of rows
// 1-4, when the frame allows one and every one of those rows has a coordinate there.
func readBox(rows []engine.StepRow, t *Tokens, frame Frame, mode Mode) ([Size]int32, bool) {
	switch frame {
	case FrameEmpty:
		return [Size]int32{t.BoxStart, t.None, t.BoxEnd, t.Null, t.Null, t.Null}, true
	case FrameIllegal:
		return [Size]int32{}, false
	}
	box := [Size]int32{t.BoxStart, 0, 0, 0, 0, t.BoxEnd}
	for r := 1; r <= 4; r++ {
		c, ok := rowCoordinate(rows[r], t, mode)
		if !ok {
			return [Size]int32{}, false
		}
		box[r] = c
	}
	return box, true
}

// rowCoordinate is one row's coordinate in a box: its most probable coordinate among its
// top 4, or rejected when, in hybrid mode, the row is torn between distant places (best
// p < 0.9, and more than one coordinate in the top 4 spanning more than 60 ids, 6 % of
// the image side). ok is false when the top 4 hold no coordinate.
func rowCoordinate(r engine.StepRow, t *Tokens, mode Mode) (id int32, ok bool) {
	var first int32
	var firstP float32
	n, lo, hi := 0, int32(0), int32(0)
	for i, id := range r.TopIDs[:boxTopK] {
		if !t.IsCoord(id) {
			continue
		}
		if n == 0 {
			first, firstP, lo, hi = id, r.TopProbs[i], id, id
		}
		lo, hi = min(lo, id), max(hi, id)
		n++
	}
	if n == 0 {
		return 0, false
	}
	if mode == Hybrid && firstP < abnormalProbMax && n > 1 && hi-lo > abnormalSpread {
		return rejected, true
	}
	return first, true
}

// readLabel is upstream decode_ref: <ref> and, from each of rows 1-5, its most probable
// non-coordinate among its top 5, when row 0 says <ref> with p >= 0.6.
func readLabel(rows []engine.StepRow, t *Tokens) ([Size]int32, bool) {
	if rows[0].Watch[watchRefStart] < refStartMin {
		return [Size]int32{}, false
	}
	words := [Size]int32{t.RefStart}
	for r := 1; r < Size; r++ {
		found := false
		for _, id := range rows[r].TopIDs[:labelTopK] {
			if !t.IsCoord(id) {
				words[r], found = id, true
				break
			}
		}
		if !found {
			return [Size]int32{}, false
		}
	}
	return words, true
}
