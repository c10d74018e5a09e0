package engine

// Prediction is the body of a /predict response (seed SERVING.md section 3). The same type
// is embedded in a job's result, so both paths carry exactly the same fields.
type Prediction struct {
	Query              string      `json:"query"`
	Width              int         `json:"width"`
	Height             int         `json:"height"`
	CanonicalSize      [2]int      `json:"canonical_size"` // [W, H] of what the model saw
	GridHW             [2]int      `json:"grid_hw"`        // [h, w] in 14-px patches
	NumImageTokens     int         `json:"num_image_tokens"`
	PromptTokens       int         `json:"prompt_tokens"`
	PrefillTokens      int         `json:"prefill_tokens"` // padded prefill length
	RawText            string      `json:"raw_text"`
	Detections         []Detection `json:"detections"`
	Points             []Point     `json:"points"`
	NumGeneratedTokens int         `json:"num_generated_tokens"`
	StoppedOnEOS       bool        `json:"stopped_on_eos"`
	DecodeMode         string      `json:"decode_mode"` // ar_greedy_trace | ar_greedy
	TimingMS           Timing      `json:"timing_ms"`
	OverlayPNGBase64   *string     `json:"overlay_png_b64"` // null unless requested

	// Tokens are the generated ids (EOS included when it was generated). They are not part
	// of the /predict contract; `worker detect` prints them.
	Tokens []int32 `json:"-"`
}

// Detection is one box, in original-image pixels and in the model's 0..1000 space.
type Detection struct {
	Label   string     `json:"label"`
	Box     [4]float64 `json:"box"`      // x1, y1, x2, y2 in original pixels
	BoxNorm [4]int     `json:"box_norm"` // 0..1000
}

// Point is one 2-coordinate answer.
type Point struct {
	Label     string     `json:"label"`
	Point     [2]float64 `json:"point"`      // x, y in original pixels
	PointNorm [2]int     `json:"point_norm"` // 0..1000
}

// Timing is the per-stage wall time of one prediction, in milliseconds.
type Timing struct {
	Vision     float64 `json:"vision"`
	Prefill    float64 `json:"prefill"`
	Decode     float64 `json:"decode"`
	Total      float64 `json:"total"`
	DecodeTokS float64 `json:"decode_tok_s"`
}
