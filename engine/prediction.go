package engine

// Prediction is the model's answer to one request, with what the run measured. It is a
// plain value, and each contract writes its own JSON from it: /predict (httpcompat) with
// types of its own that print floats as the upstream Python server does, the job results
// (jobs) with Detection and Point as tagged here and a timing of the job's own stages.
type Prediction struct {
	Query              string
	Width, Height      int    // original image size
	CanonicalSize      [2]int // [W, H] of what the model saw
	GridHW             [2]int // [h, w] in 14-px patches
	NumImageTokens     int    //
	PromptTokens       int    //
	PrefillTokens      int    // padded prefill length
	RawText            string // the generated text
	Detections         []Detection
	Points             []Point
	NumGeneratedTokens int
	StoppedOnEOS       bool
	DecodeMode         string // ar_greedy_trace | ar_greedy
	GenerationMode     GenerationMode
	DecodeSteps        int // device steps after the prefill (AR: one per token after the first)
	TimingMS           Timing
	Tokens             []int32   // the generated ids (EOS included when it was generated)
	Probs              []float32 // each generated id's probability, as Tokens (nil when the engine gives none)
	Batch              int       // the most sequences it was decoded with in one step (1 = alone)
	// Warnings say what looks wrong with the request though it ran: a query that lists
	// categories without </c>, an empty category (prompt.QueryWarnings).
	Warnings []string
	// Simulated marks an answer of the simulated chip (LA_ENGINE=sim, docs/sim.md): text
	// made up at the chip's speed, not the model's. Every place that shows an answer (the
	// result, /predict, the overlay) says so.
	Simulated bool
}

// Detection is one box, in original-image pixels and in the model's 0..1000 space, with
// the model's confidence in it.
type Detection struct {
	Label   string     `json:"label"`
	Box     [4]float64 `json:"box"`      // x1, y1, x2, y2 in original pixels
	BoxNorm [4]int     `json:"box_norm"` // 0..1000
	Score   float64    `json:"score"`    // 0..1, from the probabilities of its tokens (docs/scores.md)
}

// Point is one 2-coordinate answer.
type Point struct {
	Label     string     `json:"label"`
	Point     [2]float64 `json:"point"`      // x, y in original pixels
	PointNorm [2]int     `json:"point_norm"` // 0..1000
	Score     float64    `json:"score"`      // 0..1, as Detection.Score
}

// Timing is the per-stage wall time of one prediction, in milliseconds.
type Timing struct {
	Vision     float64 `json:"vision"`
	Prefill    float64 `json:"prefill"`
	Decode     float64 `json:"decode"`
	Total      float64 `json:"total"`
	DecodeTokS float64 `json:"decode_tok_s"`
}
