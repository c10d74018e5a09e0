package httpcompat

import "github.com/locateanything/detect/engine"

// PredictResponse is the /predict answer as the upstream Python server writes it: its keys
// in its order, floats always written as floats, lists never null
// (TestResponseKeysMatchPrediction holds it to the contract). Two additions, which clients
// of the upstream server ignore (docs/http.md, "Additions"): a score on every detection and
// point, and warnings about the query when there are any.
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
