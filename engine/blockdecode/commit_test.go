package blockdecode

import (
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
)

// tinyTokens are the tiny-shapes ids (decisions.json's).
var tinyTokens = &Tokens{BoxStart: 416, BoxEnd: 417, RefStart: 418, RefEnd: 419, CoordStart: 421, CoordEnd: 1421,
	None: 359, Null: 1422, IMEnd: 412, TextMask: 420}

// argmaxBlock is a block whose row i is ids[i] with probability 0.5 + i/100, nothing else
// likely: it reads by argmax unless it is a box or a label.
func argmaxBlock(ids ...int32) []engine.StepRow {
	rows := make([]engine.StepRow, len(ids))
	for i, id := range ids {
		rows[i] = stepRow([][2]float64{{float64(id), 0.5 + float64(i)/100}}, 1424, K, tinyTokens.Watch())
	}
	return rows
}

// <|im_end|> inside a text block ends generation after it (upstream would decode on), and
// each committed token keeps the probability of the row that predicted it.
func TestBlockStopsAtIMEndInsideText(t *testing.T) {
	d, err := Block(argmaxBlock(7, 8, 412, 9, 10, 11), tinyTokens, Hybrid, 48)
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != TypeRefObject || !slices.Equal(d.Commit, []int32{7, 8, 412}) || !d.Stop ||
		!slices.Equal(d.CutFrom, []int32{7, 8, 412, 9, 10, 11}) || !slices.Equal(d.Probs, []float32{0.5, 0.51, 0.52}) {
		t.Fatalf("%+v", d)
	}
}

// The budget cuts a block; running out is not a stop rule (the caller counts tokens).
func TestBlockCutToBudget(t *testing.T) {
	d, err := Block(argmaxBlock(7, 8, 9, 10, 11, 12), tinyTokens, Fast, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Commit, []int32{7, 8, 9, 10}) || d.Stop || len(d.Probs) != 4 || d.CutFrom == nil {
		t.Fatalf("%+v", d)
	}
	d, err = Block(argmaxBlock(7, 8, 9, 10, 11, 12), tinyTokens, Fast, 6)
	if err != nil || len(d.Commit) != 6 || d.CutFrom != nil {
		t.Fatalf("%+v, %v", d, err)
	}
}

// The end block commits <|im_end|>, with row 0's probability of it, whatever row 0's argmax.
func TestEndBlockCommitsIMEnd(t *testing.T) {
	rows := argmaxBlock(1422, 1422, 1422, 1422, 1422, 7) // all <null> but a last text row: no legal frame
	rows[0] = stepRow([][2]float64{{1422, 0.6}, {412, 0.3}}, 1424, K, tinyTokens.Watch())
	d, err := Block(rows, tinyTokens, Hybrid, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != TypeIMEnd || !d.Stop || !slices.Equal(d.Commit, []int32{412}) || d.Probs[0] != float32(0.3) {
		t.Fatalf("%+v", d)
	}
}

// A one-token step in hybrid mode: </box> returns to blocks, a coordinate continues, text
// ends generation with the token committed.
func TestARDecisions(t *testing.T) {
	row := func(id int32) engine.StepRow {
		return stepRow([][2]float64{{float64(id), 0.75}}, 1424, K, tinyTokens.Watch())
	}
	for _, c := range []struct {
		tok            int32
		toBlocks, stop bool
	}{{417, true, false}, {500, false, false}, {359, false, false}, {7, false, true}, {412, false, true}} {
		d, err := AR(row(c.tok), tinyTokens, Hybrid, 5)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(d.Commit, []int32{c.tok}) || d.ToBlocks != c.toBlocks || d.Stop != c.stop || d.Probs[0] != 0.75 {
			t.Errorf("token %d: %+v", c.tok, d)
		}
	}
}

func TestRowsAreChecked(t *testing.T) {
	if _, err := Block(argmaxBlock(1, 2, 3), tinyTokens, Hybrid, 5); err == nil {
		t.Error("a block of three rows was read")
	}
	short := argmaxBlock(1, 2, 3, 4, 5, 6)
	short[2].TopIDs = short[2].TopIDs[:3]
	if _, err := Block(short, tinyTokens, Hybrid, 5); err == nil {
		t.Error("a row of three top ids was read")
	}
	if _, err := Block(argmaxBlock(1, 2, 3, 4, 5, 6), tinyTokens, Slow, 5); err == nil {
		t.Error("a block was read in slow mode")
	}
}
