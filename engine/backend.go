package engine

// Backend is one loaded model on one device, driven step by step. Its implementations sit
// behind the C ABI in engine/native (the CPU backend in C; the Blackhole backend). Every
// call must come from one goroutine locked to one OS thread (the chip's owner); the native
// binding takes care of that.
type Backend interface {
	// Name is the backend's short name ("cpu", "ttnn").
	Name() string
	// Vision runs the vision tower, patch merge and projector on patches laid out
	// [gridH*gridW, 3, 14, 14] and keeps the gridH*gridW/4 image embeddings for the next
	// Prefill.
	Vision(patches []float32, gridH, gridW int) error
	// Prefill runs the prompt through the decoder, with the kept image embeddings spliced
	// in order over the positions whose id is the image-context token, and returns the
	// greedy first generated token.
	Prefill(ids []int32) (int32, error)
	// Decode appends token at the next position and returns the greedy next token.
	Decode(token int32) (int32, error)
	// Reset forgets the KV cache and image embeddings, ready for the next request.
	Reset() error
	// PrefillLength is the padded length a prompt of n tokens is run at (n on a backend
	// that does not pad).
	PrefillLength(n int) int
	// Close frees everything. The Backend is unusable afterwards.
	Close() error
}
