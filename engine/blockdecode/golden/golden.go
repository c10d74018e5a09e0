// Package golden reads the PyTorch reference's hybrid-decoding goldens
// (tools/refmodel/testdata/hybrid/*.json, docs/hybrid-decoding.md "Goldens") for tests:
// the runs, their per-step records, and each block step's rows rebuilt as the StepRows a
// backend would have returned.
package golden

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
)

// Dir is the goldens' directory relative to a package two levels below the repository
// root (engine/pipeline, engine/blockdecode).
const Dir = "../../tools/refmodel/testdata/hybrid/"

// File is one goldens file of runs (tiny-bf16.json, tiny-f32.json, tiny-shapes-blocks.json).
type File struct {
	Checkpoint string   `json:"checkpoint"`
	TokenIDs   TokenIDs `json:"token_ids"`
	Runs       []Run    `json:"runs"`
}

// TokenIDs is the file's token_ids.
type TokenIDs struct {
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

// Tokens converts the file's ids.
func (g TokenIDs) Tokens() *blockdecode.Tokens {
	return &blockdecode.Tokens{BoxStart: g.BoxStart, BoxEnd: g.BoxEnd, RefStart: g.RefStart, RefEnd: g.RefEnd,
		CoordStart: g.CoordStart, CoordEnd: g.CoordEnd, None: g.None, Null: g.Null, IMEnd: g.IMEnd, TextMask: g.TextMask}
}

// Run is one generation.
type Run struct {
	Case         string           `json:"case"`
	Image        string           `json:"image"` // repository path
	InTokenLimit int              `json:"in_token_limit"`
	Task         string           `json:"task"`
	Query        string           `json:"query"`
	PromptIDs    []int32          `json:"prompt_ids"`
	Mode         blockdecode.Mode `json:"mode"`
	MaxNew       int              `json:"max_new"`
	Tokens       []int32          `json:"tokens"`
	SlowTokens   []int32          `json:"slow_tokens"`
	Summary      struct {
		Forwards       int  `json:"forwards"`
		BlockSteps     int  `json:"block_steps"`
		ARSteps        int  `json:"ar_steps"`
		Boxes          int  `json:"boxes"`
		BoxesInOneStep int  `json:"boxes_in_one_step"`
		SlowForwards   int  `json:"slow_forwards"`
		SameAsSlow     bool `json:"same_as_slow"`
	} `json:"summary"`
	Steps []Step `json:"steps"`
}

// Step is one forward's record.
type Step struct {
	Kind      string           `json:"kind"` // "block" or "ar"
	Pending   int              `json:"pending"`
	Type      blockdecode.Type `json:"type"`
	Committed []int32          `json:"committed"`
	CutFrom   []int32          `json:"cut_from"`

	// Block steps.
	Slot0     int              `json:"slot0"`
	X0        []int32          `json:"x0"`
	X0P       []float32        `json:"x0_p"`
	Path      blockdecode.Path `json:"path"`
	NewTokens []int32          `json:"new_tokens"`
	Top       struct {
		IDs    [][]int32   `json:"ids"`
		Logits [][]float32 `json:"logits"`
	} `json:"top"`
	Margins []float32 `json:"margins"`
	Box     *struct {
		Frame     blockdecode.Frame `json:"frame"`
		PBoxStart float32           `json:"p_box_start"`
		PNone1    float32           `json:"p_none_1"`
		PBoxEnd2  float32           `json:"p_box_end_2"`
		PNull3    float32           `json:"p_null_3"`
		PNull4    float32           `json:"p_null_4"`
		EndScore  float32           `json:"end_score"`
		Rows      []Ranked          `json:"rows"`
	} `json:"box"`
	Ref *struct {
		PRefStart float32  `json:"p_ref_start"`
		Rows      []Ranked `json:"rows"`
	} `json:"ref"`

	// One-token steps.
	Token  int32   `json:"token"`
	P      float32 `json:"p"`
	Margin float32 `json:"margin"`
}

// Ranked is one row's ranking as a reading saw it.
type Ranked struct {
	TopIDs []int32   `json:"top_ids"`
	TopP   []float32 `json:"top_p"`
	NextP  float32   `json:"next_p"`
	// A box row with a coordinate in its top 4: the first of them.
	FirstID int32   `json:"first_id"`
	FirstP  float32 `json:"first_p"`
}

// Load reads a goldens file.
func Load(path string) (*File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Runs) == 0 {
		return nil, fmt.Errorf("%s: no runs", path)
	}
	return &f, nil
}

// CommittedProbs is the probability the reference's rows gave each token the step
// committed, where the record holds it: a box's coordinates (their row's first valid), a
// label's or argmax's tokens (their row's ranking), a one-token step's token. ok[i] is
// false where the record does not say.
func (s *Step) CommittedProbs() (p []float32, ok []bool) {
	p, ok = make([]float32, len(s.Committed)), make([]bool, len(s.Committed))
	if s.Kind == "ar" {
		p[0], ok[0] = s.P, true
		return p, ok
	}
	for i, id := range s.Committed {
		if i < len(s.X0) && s.X0[i] == id {
			p[i], ok[i] = s.X0P[i], true
			continue
		}
		if s.Box != nil && i >= 1 && i-1 < len(s.Box.Rows) && s.Box.Rows[i-1].FirstID == id && s.Box.Rows[i-1].FirstP > 0 {
			p[i], ok[i] = s.Box.Rows[i-1].FirstP, true
			continue
		}
		if s.Ref != nil && i >= 1 && i-1 < len(s.Ref.Rows) {
			r := s.Ref.Rows[i-1]
			for j, t := range r.TopIDs {
				if t == id {
					p[i], ok[i] = r.TopP[j], true
				}
			}
		}
	}
	return p, ok
}

// Rows rebuilds what a backend's Step returned for this step, with k top ids per row and
// tok.Watch()'s watched ids: for a block step its six rows, for a one-token step its one.
// The record keeps each row's five largest logits and its argmax's probability, and the
// exact float32 probabilities every reading compared; the rows carry those exact values
// where the record has them and the softmax rebuilt from the logits elsewhere, so the
// rules read the same numbers the reference compared. Row 5's watched probabilities are
// the end score on </box> alone (the record keeps only their sum). Ids the record does not
// rank are given id -1 and probability 0.
func (s *Step) Rows(tok *blockdecode.Tokens, k int) []engine.StepRow {
	watch := tok.Watch()
	if s.Kind == "ar" {
		r := newRow(k, len(watch))
		r.TopIDs[0], r.TopProbs[0] = s.Token, s.P
		for i, id := range watch {
			if id == s.Token {
				r.Watch[i] = s.P
			}
		}
		return []engine.StepRow{r}
	}
	rows := make([]engine.StepRow, len(s.Top.IDs))
	for i := range rows {
		r := newRow(k, len(watch))
		// The softmax of the five largest logits, scaled by the argmax's probability.
		p := map[int32]float32{}
		for j, id := range s.Top.IDs[i] {
			p[id] = float32(float64(s.X0P[i]) * math.Exp(float64(s.Top.Logits[i][j])-float64(s.Top.Logits[i][0])))
		}
		ids := s.Top.IDs[i]
		p[s.X0[i]] = s.X0P[i]
		// The readings' own rankings, where there are any, are exact.
		if s.Ref != nil && i >= 1 && i-1 < len(s.Ref.Rows) {
			ids = exact(p, s.Ref.Rows[i-1], ids)
		}
		if s.Box != nil && i >= 1 && i-1 < len(s.Box.Rows) {
			ids = exact(p, s.Box.Rows[i-1], ids)
		}
		for j := range k {
			if j < len(ids) {
				r.TopIDs[j], r.TopProbs[j] = ids[j], p[ids[j]]
			} else {
				r.TopIDs[j] = -1
			}
		}
		for j, id := range watch {
			r.Watch[j] = p[id]
		}
		rows[i] = r
	}
	if b := s.Box; b != nil && len(rows) == blockdecode.Size {
		set := func(row int, id int32, v float32) {
			for j, w := range watch {
				if w == id {
					rows[row].Watch[j] = v
				}
			}
		}
		set(0, tok.BoxStart, b.PBoxStart)
		set(1, tok.None, b.PNone1)
		set(2, tok.BoxEnd, b.PBoxEnd2)
		set(3, tok.Null, b.PNull3)
		set(4, tok.Null, b.PNull4)
		set(5, tok.BoxEnd, b.EndScore)
		set(5, tok.Null, 0)
		set(5, tok.IMEnd, 0)
	}
	if s.Ref != nil && len(rows) > 0 {
		for j, w := range watch {
			if w == tok.RefStart {
				rows[0].Watch[j] = s.Ref.PRefStart
			}
		}
	}
	return rows
}

// exact puts a reading's exact probabilities into p and returns the ranking it saw,
// followed by the ids of fallback it does not list.
func exact(p map[int32]float32, r Ranked, fallback []int32) []int32 {
	ids := append([]int32(nil), r.TopIDs...)
	for j, id := range r.TopIDs {
		p[id] = r.TopP[j]
	}
	for _, id := range fallback {
		seen := false
		for _, x := range ids {
			seen = seen || x == id
		}
		if !seen {
			ids = append(ids, id)
		}
	}
	return ids
}

func newRow(k, nWatch int) engine.StepRow {
	r := engine.StepRow{TopIDs: make([]int32, k), TopProbs: make([]float32, k), Watch: make([]float32, nWatch)}
	for j := range r.TopIDs {
		r.TopIDs[j] = -1
	}
	return r
}
