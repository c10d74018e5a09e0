package engine

// Backend is one loaded model on one device, driven step by step. Its implementations sit
// behind the C ABI in engine/native (the CPU backend in C; the Blackhole backend) or are
// written in Go (engine/sim). Every call must come from one goroutine locked to one OS
// thread (the chip's owner); the native binding takes care of that.
//
// A backend holds MaxBatch sequence slots, each with its own KV cache, and has one way
// through its decoder: Step. A request runs Vision, then a Step on a free slot with the
// prompt pending (its prefill: one output row, the first token, or none when hybrid
// decoding starts with a block), then Steps that advance several slots in one call (AR
// decoding: one pending token per slot; parallel box decoding: pending tokens and a
// block); Release frees its slot. Batching never changes a sequence's tokens: a slot
// decodes to the same tokens alone or with others.
type Backend interface {
	// Name is the backend's short name ("cpu", "ttnn", "sim").
	Name() string
	// MaxBatch is the number of sequence slots, 0..MaxBatch-1.
	MaxBatch() int
	// Vision runs the vision tower, patch merge and projector on patches laid out
	// [gridH*gridW, 3, 14, 14] and keeps the gridH*gridW/4 image embeddings for the next
	// prefill.
	Vision(patches []float32, gridH, gridW int) error
	// Step runs one step for len(slots) distinct slots in one forward (StepSlot says what
	// each slot's rows are). rows gets one StepRow per output row, slot after slot
	// (StepRows); each row's TopIDs and TopProbs must have length k and its Watch length
	// len(watch), and are overwritten. k = 1 without watched ids is greedy decoding.
	Step(slots []StepSlot, k int, watch []int32, rows []StepRow) error
	// Release frees a slot for the next prefill; the other slots are untouched.
	Release(slot int) error
	// Reset releases every slot and forgets the image embeddings.
	Reset() error
	// PrefillLength is the padded length a prompt of n tokens is run at (n on a backend
	// that does not pad).
	PrefillLength(n int) int
	// Close frees everything. The Backend is unusable afterwards.
	Close() error
}

// StepSlot is one slot's part of a Step, the one way through the decoder (in the shape of
// llama.cpp's llama_batch, grouped by slot). With L positions cached (0 for a free slot,
// which the step then prefills and makes live), Pending[j] runs at position L+j and is kept
// (the slot then holds L' = L+len(Pending)); Block row i runs at position L'-1+i, sees every
// cached position but L'-1 (row 0 stands in for the last committed token) and its whole
// block in both directions (causally, rows 0..i, on a checkpoint whose
// text_config.causal_attn is set). A free slot's pending ids equal to the image-context
// token take the image embeddings kept by Vision, in order (at most one slot of a Step
// holds them); images come only with a prefill, so a Step holding the image-context id in
// a live slot's Pending or in any Block is refused, on every backend.
//
// Output rows: every Block row; without a Block, the last Pending row's, unless NoOutput.
// A prefill is a free slot with the prompt pending (NoOutput when hybrid decoding starts
// with a block), an AR step is one pending token per slot, a box step pending and a Block.
type StepSlot struct {
	Slot     int
	Pending  []int32 // committed tokens the slot's cache lacks (the prompt, for a free slot)
	Block    []int32 // empty: no block
	NoOutput bool    // without a Block only: cache Pending and output no row
}

// StepRow is one output row of a Step: what the acceptance rules read instead of a whole
// row of logits.
type StepRow struct {
	TopIDs   []int32   // the k most probable ids, most probable first; equal probabilities in ascending id order
	TopProbs []float32 // their probabilities (float32 softmax over the vocabulary)
	Watch    []float32 // the probability of each watched id, in the order asked
}

// Step limits every backend accepts.
const (
	StepMaxRows  = 16 // len(Block) of one slot, and len(Pending) of a live one
	StepMaxK     = 8
	StepMaxWatch = 16
)

// StepRows is the number of output rows a Step over slots writes.
func StepRows(slots []StepSlot) int {
	n := 0
	for _, s := range slots {
		switch {
		case len(s.Block) > 0:
			n += len(s.Block)
		case !s.NoOutput:
			n++
		}
	}
	return n
}

// NewStepRows allocates n rows for a Step with k top ids and nWatch watched ids.
func NewStepRows(n, k, nWatch int) []StepRow {
	rows := make([]StepRow, n)
	ids := make([]int32, n*k)
	probs := make([]float32, n*k+n*nWatch)
	for i := range rows {
		rows[i] = StepRow{TopIDs: ids[i*k : (i+1)*k : (i+1)*k], TopProbs: probs[i*k : (i+1)*k : (i+1)*k],
			Watch: probs[n*k+i*nWatch : n*k+(i+1)*nWatch : n*k+(i+1)*nWatch]}
	}
	return rows
}
