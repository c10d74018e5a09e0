package engine

import "time"

// Sequence is one request running in a device slot: what it has generated so far and the
// device time it has used. The engine that started it owns and updates it; the chip owner
// reads Done to know when to finish it.
type Sequence struct {
	Prepared *Prepared
	Slot     int
	Mode     GenerationMode // how it is decoded (Prepared's resolved mode)

	Tokens       []int32   // generated ids, EOS included when it was generated
	Probs        []float32 // each generated id's softmax probability, as Tokens
	Done         bool      // EOS generated or the budget spent: Finish it
	StoppedOnEOS bool

	// Parallel box decoding (Mode hybrid, docs/hybrid-decoding.md). Pending is how many of
	// the last Tokens the slot's cache does not hold yet: the next step runs them first.
	// OneToken says the sequence is finishing a box one token per step rather than reading
	// blocks.
	Pending  int
	OneToken bool

	Vision       time.Duration
	Prefill      time.Duration // includes the first token (AR; hybrid's prefill picks none)
	Decode       time.Duration // the decode steps it took part in, whole steps
	DecodeSteps  int           // device steps after the prefill
	LargestBatch int           // the largest number of sequences it was decoded with in one step
}

// DecodeTokensPerSecond is the sequence's own decode rate: the tokens its decode steps
// wrote over their time (in a batch, each step serves several sequences). In AR mode that
// is every token after the first, which the prefill writes; in hybrid mode every token.
func (s *Sequence) DecodeTokensPerSecond() float64 {
	if s.DecodeSteps == 0 || s.Decode <= 0 {
		return 0
	}
	n := s.DecodeSteps
	if s.Mode == GenerationHybrid {
		n = len(s.Tokens)
	}
	return float64(n) / s.Decode.Seconds()
}

// Batcher is an Engine whose device runs several requests at once, one decode step at a
// time (continuous batching): the chip owner admits a request with Start, advances every
// running one with Step, and ends each with Finish, or Abandon when its caller has gone.
// The device-side methods (Start, Step, Finish, Abandon) follow Generate's rule: one
// goroutine, locked to one OS thread. A sequence's tokens never depend on what it was
// batched with.
type Batcher interface {
	Engine
	// MaxBatch is the number of sequences that can run at once.
	MaxBatch() int
	// Start runs vision and prefill for p in a free slot and returns the running sequence
	// with its first token (it may already be Done). It fails when no slot is free.
	Start(p *Prepared) (*Sequence, error)
	// Step advances every sequence in seqs, none of them Done, by one token.
	Step(seqs []*Sequence) error
	// Finish frees the sequence's slot and parses its answer.
	Finish(s *Sequence) (*Prediction, error)
	// Abandon frees the sequence's slot without an answer.
	Abandon(s *Sequence) error
}
