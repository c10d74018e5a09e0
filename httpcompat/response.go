package httpcompat

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/rawjson"
)

// PredictResponse is the /predict answer as the upstream Python server writes it: its keys
// in its order, floats always written as floats, lists never null
// (TestResponseKeysMatchPrediction holds it to the contract). Three additions, which clients
// of the upstream server ignore (docs/http.md, "Additions"): a score on every detection and
// point, warnings about the query when there are any, and, for an answer decoded in hybrid
// mode, decode_steps (MarshalJSON writes it after num_generated_tokens).
type PredictResponse struct {
	Query              string      `json:"query"`
	Width              int         `json:"width"`
	Height             int         `json:"height"`
	CanonicalSize      [2]int      `json:"canonical_size"`
	GridHW             [2]int      `json:"grid_hw"`
	NumImageTokens     int         `json:"num_image_tokens"`
	PromptTokens       int         `json:"prompt_tokens"`
	PrefillTokens      int         `json:"prefill_tokens"`
	RawText            string      `json:"raw_text"`
	Detections         []detection `json:"detections"`
	Points             []point     `json:"points"`
	NumGeneratedTokens int         `json:"num_generated_tokens"`
	StoppedOnEOS       bool        `json:"stopped_on_eos"`
	DecodeMode         string      `json:"decode_mode"`
	TimingMS           timing      `json:"timing_ms"`
	OverlayPNGBase64   *string     `json:"overlay_png_b64"`
	Warnings           []string    `json:"warnings,omitempty"` // an addition: absent when there are none
	// Simulated marks an answer of the simulated chip (LA_ENGINE=sim): made up, not the
	// model's. An addition, absent for a real answer, whose bytes stay the upstream's.
	Simulated bool `json:"simulated,omitempty"`

	// DecodeSteps is the device steps after the prefill, written (as decode_steps, right
	// after num_generated_tokens) only for a hybrid answer: an AR answer's bytes stay the
	// upstream server's, and its steps are its tokens less one anyway.
	DecodeSteps *int `json:"-"`
}

// MarshalJSON writes the struct's keys in its order and, when DecodeSteps is set,
// "decode_steps" between num_generated_tokens and stopped_on_eos.
func (r PredictResponse) MarshalJSON() ([]byte, error) {
	type plain PredictResponse // the same fields without this method
	b, err := rawjson.Marshal(plain(r))
	if err != nil || r.DecodeSteps == nil {
		return b, err
	}
	// Inside a JSON string every quote is escaped, so `,"stopped_on_eos":` can only be the
	// key itself, which no nested object has.
	at := bytes.Index(b, []byte(`,"stopped_on_eos":`))
	if at < 0 {
		return nil, errors.New("predict response: no stopped_on_eos key to write decode_steps before")
	}
	out := make([]byte, 0, len(b)+32)
	out = append(out, b[:at]...)
	out = append(out, `,"decode_steps":`...)
	out = strconv.AppendInt(out, int64(*r.DecodeSteps), 10)
	return append(out, b[at:]...), nil
}

type detection struct {
	Label   string     `json:"label"`
	Box     [4]pyFloat `json:"box"`
	BoxNorm [4]int     `json:"box_norm"`
	Score   pyFloat    `json:"score"` // an addition
}

type point struct {
	Label     string     `json:"label"`
	Point     [2]pyFloat `json:"point"`
	PointNorm [2]int     `json:"point_norm"`
	Score     pyFloat    `json:"score"` // an addition
}

type timing struct {
	Vision     pyFloat `json:"vision"`
	Prefill    pyFloat `json:"prefill"`
	Decode     pyFloat `json:"decode"`
	Total      pyFloat `json:"total"`
	DecodeTokS pyFloat `json:"decode_tok_s"`
}

// NewPredictResponse writes p; overlay is the base64 PNG when one was asked for, else nil.
func NewPredictResponse(p *engine.Prediction, overlay *string) PredictResponse {
	r := PredictResponse{
		Query:              p.Query,
		Width:              p.Width,
		Height:             p.Height,
		CanonicalSize:      p.CanonicalSize,
		GridHW:             p.GridHW,
		NumImageTokens:     p.NumImageTokens,
		PromptTokens:       p.PromptTokens,
		PrefillTokens:      p.PrefillTokens,
		RawText:            p.RawText,
		Detections:         make([]detection, 0, len(p.Detections)),
		Points:             make([]point, 0, len(p.Points)),
		NumGeneratedTokens: p.NumGeneratedTokens,
		StoppedOnEOS:       p.StoppedOnEOS,
		DecodeMode:         p.DecodeMode,
		TimingMS: timing{
			Vision:     pyFloat(p.TimingMS.Vision),
			Prefill:    pyFloat(p.TimingMS.Prefill),
			Decode:     pyFloat(p.TimingMS.Decode),
			Total:      pyFloat(p.TimingMS.Total),
			DecodeTokS: pyFloat(p.TimingMS.DecodeTokS),
		},
		OverlayPNGBase64: overlay,
		Warnings:         p.Warnings,
		Simulated:        p.Simulated,
	}
	if p.GenerationMode == engine.GenerationHybrid {
		steps := p.DecodeSteps
		r.DecodeSteps = &steps
	}
	for _, d := range p.Detections {
		r.Detections = append(r.Detections, detection{
			Label:   d.Label,
			Box:     [4]pyFloat{pyFloat(d.Box[0]), pyFloat(d.Box[1]), pyFloat(d.Box[2]), pyFloat(d.Box[3])},
			BoxNorm: d.BoxNorm,
			Score:   pyFloat(d.Score),
		})
	}
	for _, pt := range p.Points {
		r.Points = append(r.Points, point{
			Label:     pt.Label,
			Point:     [2]pyFloat{pyFloat(pt.Point[0]), pyFloat(pt.Point[1])},
			PointNorm: pt.PointNorm,
			Score:     pyFloat(pt.Score),
		})
	}
	return r
}
