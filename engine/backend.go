package engine

// Backend is one loaded model on one device, driven step by step. Its implementations sit
// behind the C ABI in engine/native (the CPU backend in C; the Blackhole backend) or are
// written in Go (engine/sim). Every call must come from one goroutine locked to one OS
// thread (the chip's owner); the native binding takes care of that.
//
// A backend holds MaxBatch sequence slots, each with its own KV cache. A request runs
// Vision, then Prefill into a free slot, then Decode steps, which advance several slots by
// one token each in one call; Release frees its slot. Batching never changes a sequence's
// tokens: a slot decodes to the same greedy tokens alone or with others.
type Backend interface {
	// Name is the backend's short name ("cpu", "ttnn", "sim").
	Name() string
	// MaxBatch is the number of sequence slots, 0..MaxBatch-1.
	MaxBatch() int
	// Vision runs the vision tower, patch merge and projector on patches laid out
	// [gridH*gridW, 3, 14, 14] and keeps the gridH*gridW/4 image embeddings for the next
	// Prefill.
	Vision(patches []float32, gridH, gridW int) error
	// Prefill runs the prompt from position 0 in a free slot, with the kept image
	// embeddings spliced in order over the positions whose id is the image-context token,
	// and returns the greedy first token (and its probability when wantProb is set).
	Prefill(slot int, ids []int32, wantProb bool) (first int32, prob float32, err error)
	// Decode runs one step for len(slots) distinct live slots: tokens[i] is appended at
	// the next position of slots[i] and the greedy next token written to next[i] (its
	// probability to prob[i] when prob is not nil).
	Decode(slots []int, tokens, next []int32, prob []float32) error
	// Release frees a slot for the next Prefill; the other slots are untouched.
	Release(slot int) error
	// Reset releases every slot and forgets the image embeddings.
	Reset() error
	// PrefillLength is the padded length a prompt of n tokens is run at (n on a backend
	// that does not pad).
	PrefillLength(n int) int
	// Close frees everything. The Backend is unusable afterwards.
	Close() error
}
