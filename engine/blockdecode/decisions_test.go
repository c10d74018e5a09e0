package blockdecode

import (
	"cmp"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
)

// The reference's goldens (tools/refmodel/gen_hybrid_goldens.py).
const goldenDir = "../../tools/refmodel/testdata/hybrid/"

type goldenTokens struct {
	BoxStart   int32 `json:"box_start"`
	BoxEnd     int32 `json:"box_end"`
	RefStart   int32 `json:"ref_start"`
	RefEnd     int32 `json:"ref_end"`
	CoordStart int32 `json:"coord_start"`
	CoordEnd   int32 `json:"coord_end"`
	None       int32 `json:"none"`
	Null       int32 `json:"null"`
	IMEnd      int32 `json:"im_end"`
	TextMask   int32 `json:"text_mask"`
	BlockSize  int   `json:"block_size"`
}

func (g goldenTokens) tokens() *Tokens {
	return &Tokens{BoxStart: g.BoxStart, BoxEnd: g.BoxEnd, RefStart: g.RefStart, RefEnd: g.RefEnd,
		CoordStart: g.CoordStart, CoordEnd: g.CoordEnd, None: g.None, Null: g.Null, IMEnd: g.IMEnd, TextMask: g.TextMask}
}

type decisionOutcome struct {
	X0        []int32 `json:"x0"`
	Frame     Frame   `json:"frame"`
	Path      Path    `json:"path"`
	NewTokens []int32 `json:"new_tokens"`
	Type      Type    `json:"type"`
	Tokens    []int32 `json:"tokens"`
	ToAR      bool    `json:"to_ar"`
	Terminal  bool    `json:"terminal"`
}

type decisions struct {
	TokenIDs   goldenTokens `json:"token_ids"`
	VocabSize  int          `json:"vocab_size"`
	Thresholds struct {
		BoxTopK         int     `json:"box_top_k"`
		RefTopK         int     `json:"ref_top_k"`
		RefStartMin     float32 `json:"ref_start_min"`
		BoxStartMin     float32 `json:"box_start_min"`
		EndScoreMin     float32 `json:"end_score_min"`
		EmptyNoneMin    float32 `json:"empty_none_min"`
		EmptyBoxEndMin  float32 `json:"empty_box_end_min"`
		EmptyNullMin    float32 `json:"empty_null_min"`
		AbnormalProb    float32 `json:"abnormal_prob"`
		AbnormalSpread  int32   `json:"abnormal_spread"`
		RejectedCoordID int32   `json:"rejected_coordinate"`
	} `json:"thresholds"`
	Cases []struct {
		Name   string          `json:"name"`
		Rows   [][][2]float64  `json:"rows"`
		Hybrid decisionOutcome `json:"hybrid"`
		Fast   decisionOutcome `json:"fast"`
	} `json:"cases"`
	ARCases []struct {
		Token  int32 `json:"token"`
		Hybrid Type  `json:"hybrid"`
		Slow   Type  `json:"slow"`
	} `json:"ar_cases"`
}

func loadDecisions(t *testing.T) *decisions {
	t.Helper()
	raw, err := os.ReadFile(goldenDir + "decisions.json")
	if err != nil {
		t.Fatal(err)
	}
	var d decisions
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Cases) == 0 || len(d.ARCases) == 0 || d.VocabSize == 0 {
		t.Fatalf("decisions.json: %d cases, %d AR cases, vocabulary %d", len(d.Cases), len(d.ARCases), d.VocabSize)
	}
	return &d
}

// stepRow builds the row a backend would return for a probability vector over vocab ids
// (those not listed have probability 0): its k most probable ids, equal probabilities in
// ascending id order, and the watched ids' probabilities.
func stepRow(pairs [][2]float64, vocab, k int, watch []int32) engine.StepRow {
	p := make([]float32, vocab)
	for _, pr := range pairs {
		p[int(pr[0])] = float32(pr[1])
	}
	ids := make([]int32, vocab)
	for i := range ids {
		ids[i] = int32(i)
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return cmp.Compare(p[b], p[a]) })
	r := engine.StepRow{TopIDs: ids[:k:k], TopProbs: make([]float32, k), Watch: make([]float32, len(watch))}
	for i, id := range r.TopIDs {
		r.TopProbs[i] = p[id]
	}
	for i, id := range watch {
		r.Watch[i] = p[id]
	}
	return r
}

// The thresholds written in the goldens are the constants here, to the bit.
func TestThresholdsAreTheReferences(t *testing.T) {
	d := loadDecisions(t)
	th := d.Thresholds
	if th.BoxTopK != boxTopK || th.RefTopK != labelTopK || th.RefStartMin != refStartMin || th.BoxStartMin != boxStartMin ||
		th.EndScoreMin != endScoreMin || th.EmptyNoneMin != emptyNoneMin || th.EmptyBoxEndMin != emptyBoxEndMin ||
		th.EmptyNullMin != emptyNullMin || th.AbnormalProb != abnormalProbMax || th.AbnormalSpread != abnormalSpread ||
		th.RejectedCoordID != rejected {
		t.Fatalf("the reference's thresholds %+v differ from the constants", th)
	}
	if d.TokenIDs.BlockSize != Size {
		t.Fatalf("block size %d, want %d", d.TokenIDs.BlockSize, Size)
	}
}

// Every case of the reference's decision goldens, in hybrid and fast mode: the argmaxes,
// the frame, the reading, its new tokens, and what handle_pattern commits and decides.
func TestDecisionsMatchTheReference(t *testing.T) {
	d := loadDecisions(t)
	tok := d.TokenIDs.tokens()
	if err := tok.Validate(d.VocabSize); err != nil {
		t.Fatal(err)
	}
	watch := tok.Watch()
	for _, c := range d.Cases {
		for _, m := range []struct {
			mode Mode
			want decisionOutcome
		}{{Hybrid, c.Hybrid}, {Fast, c.Fast}} {
			t.Run(c.Name+"/"+string(m.mode), func(t *testing.T) {
				rows := make([]engine.StepRow, len(c.Rows))
				for i, pairs := range c.Rows {
					rows[i] = stepRow(pairs, d.VocabSize, K, watch)
				}
				rd, err := Read(rows, tok, m.mode)
				if err != nil {
					t.Fatal(err)
				}
				w := m.want
				if !slices.Equal(rd.X0[:], w.X0) || rd.Frame != w.Frame || rd.Path != w.Path || !slices.Equal(rd.NewTokens[:], w.NewTokens) {
					t.Fatalf("read x0 %v frame %s path %s new %v; reference x0 %v frame %s path %s new %v",
						rd.X0, rd.Frame, rd.Path, rd.NewTokens, w.X0, w.Frame, w.Path, w.NewTokens)
				}
				p := HandlePattern(rd.NewTokens, tok, m.mode)
				if p.Type != w.Type || !slices.Equal(p.Tokens, w.Tokens) || p.ToAR != w.ToAR || p.Terminal != w.Terminal {
					t.Fatalf("pattern %+v; reference type %s tokens %v to_ar %v terminal %v", p, w.Type, w.Tokens, w.ToAR, w.Terminal)
				}
				// The same through Block with a budget that cuts nothing.
				dec, err := Block(rows, tok, m.mode, 100)
				if err != nil {
					t.Fatal(err)
				}
				wantCommit := w.Tokens
				if i := slices.Index(wantCommit, tok.IMEnd); i >= 0 {
					wantCommit = wantCommit[:i+1]
				}
				if !slices.Equal(dec.Commit, wantCommit) || dec.Type != w.Type || dec.ToAR != (w.ToAR && m.mode == Hybrid) ||
					dec.Stop != (w.Terminal || slices.Contains(w.Tokens, tok.IMEnd)) || len(dec.Probs) != len(dec.Commit) {
					t.Fatalf("block decision %+v; reference %+v", dec, w)
				}
			})
		}
	}
}

func TestARKindsMatchTheReference(t *testing.T) {
	d := loadDecisions(t)
	tok := d.TokenIDs.tokens()
	for _, c := range d.ARCases {
		if got := ClassifyAR(c.Token, tok, Hybrid); got != c.Hybrid {
			t.Errorf("token %d in hybrid mode: %s, reference %s", c.Token, got, c.Hybrid)
		}
		if got := ClassifyAR(c.Token, tok, Slow); got != c.Slow {
			t.Errorf("token %d in slow mode: %s, reference %s", c.Token, got, c.Slow)
		}
	}
}
