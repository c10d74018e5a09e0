// Package sim is a simulated Blackhole p150a: an engine.Backend (LA_ENGINE=sim) that runs
// no model but costs what the chip costs. Vision, prefill and each decode step keep the
// calling thread asleep for the time a cost model gives (Costs: the chip's measured figures
// by default, and an assumed cost for batched decode steps), so the real host pipeline
// around it (image decode and preprocessing, tokenizer, prompt, answer parsing, overlays,
// storage, the queue) runs at the rate a chip would impose, without one and without
// spending host CPU on the device's share.
//
// Its answers are deterministic and well formed: it reads the task and query back from the
// prompt ids, hashes the image patches it was given, and answers one <ref> and a few boxes
// per category (docs/sim.md, "Answers"), one token per AR step, then EOS; in hybrid mode
// (hybrid.go) the same answer a unit per block step, as a model trained for parallel box
// decoding gives it. A sequence's tokens depend only on its own
// image and prompt, never on what it is batched with.
//
// Operators use it to load-test NATS, storage and autoscaling at chip rates; the tests and
// `worker loadtest` use it to prove and measure the pipeline.
package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/prompt"
	"github.com/locateanything/detect/engine/tokenizer"
)

// Name is the backend's name (LA_ENGINE=sim, /info's backend).
const Name = engine.BackendSim

// Options are what New needs: the cost model and the run-time limits, and the parts of
// the checkpoint the simulated model reads its prompts with.
type Options struct {
	Costs     Costs
	MaxBatch  int // sequence slots (LA_MAX_BATCH)
	MaxSeqLen int // positions per slot (LA_MAX_SEQ_LEN)

	Tokenizer   *tokenizer.Tokenizer // the checkpoint's: reads the instruction, writes the answer
	EOS         int32                // <|im_end|>
	ImageToken  int32                // <IMG_CONTEXT>: one per image embedding
	PatchSize   int                  // pixels per patch side (14)
	MergeKernel int                  // patches merged per image embedding, per side (2)

	// Meter, when set, is told the device time of every step.
	Meter *Meter
}

// Backend is one simulated chip. Like every engine.Backend, it must be driven from one
// goroutine at a time.
type Backend struct {
	o        Options
	imageEnd int32 // </img>: the instruction follows it
	imEnd    int32 // <|im_end|>: ends the instruction (the EOS, on the real checkpoint)
	clock    timeline

	kept   *image // vision's output, waiting for the next prefill
	slots  []slot
	fresh  []bool // Step's entries that are prefills, reused
	closed bool

	block   *blockdecode.Tokens // the ids hybrid answers are read with (hybrid.go); nil without
	noBlock error               // why block is nil
}

// image is what vision keeps for the next prefill.
type image struct {
	hash   uint64
	tokens int // image embeddings
}

// slot is one sequence: the answer it will generate and how far it has got.
type slot struct {
	live  bool
	plan  []int32 // the answer's ids, ending with EOS
	image uint64  // the image's hash: with a token's position, it makes the token's probability
	// next is the answer index of the position after the cache (pos - prompt): the token
	// the next step's first output row predicts, once its pending tokens are in.
	next       int
	pos        int   // positions in the cache
	prompt     int   // prompt length
	lastPrompt int32 // the prompt's last token, which the first block repeats
}

var _ engine.Backend = (*Backend)(nil)

// ErrClosed is returned by every call on a closed Backend.
var ErrClosed = errors.New("sim backend is closed")

// New builds a simulated chip.
func New(o Options) (*Backend, error) {
	if err := o.Costs.Validate(); err != nil {
		return nil, fmt.Errorf("sim costs: %w", err)
	}
	if o.MaxBatch < 1 || o.MaxSeqLen < 1 || o.PatchSize < 1 || o.MergeKernel < 1 {
		return nil, fmt.Errorf("sim: MaxBatch %d, MaxSeqLen %d, PatchSize %d and MergeKernel %d must be positive",
			o.MaxBatch, o.MaxSeqLen, o.PatchSize, o.MergeKernel)
	}
	if o.Tokenizer == nil {
		return nil, errors.New("sim: a tokenizer is required")
	}
	b := &Backend{o: o, slots: make([]slot, o.MaxBatch), clock: timeline{now: time.Now, sleep: sleepFor}}
	for _, t := range []struct {
		name string
		id   *int32
	}{{prompt.ImageEndToken, &b.imageEnd}, {"<|im_end|>", &b.imEnd}} {
		id, ok := o.Tokenizer.ID(t.name)
		if !ok {
			return nil, fmt.Errorf("sim: the tokenizer has no %s token", t.name)
		}
		*t.id = id
	}
	b.block, b.noBlock = blockTokens(o.Tokenizer, o.EOS)
	return b, nil
}

// Name is "sim".
func (b *Backend) Name() string { return string(Name) }

// MaxBatch is the number of sequence slots.
func (b *Backend) MaxBatch() int { return b.o.MaxBatch }

// MaxSeqLen is the number of positions of each slot.
func (b *Backend) MaxSeqLen() int { return b.o.MaxSeqLen }

// PrefillLength pads like the chip: the next power of two, at least 128.
func (b *Backend) PrefillLength(n int) int { return PrefillLength(n) }

// Vision hashes the patches (what the simulated model sees of the image) and keeps the
// hash for the next prefill, taking the vision cost of the grid.
func (b *Backend) Vision(patches []float32, gridH, gridW int) error {
	if b.closed {
		return ErrClosed
	}
	k := b.o.MergeKernel
	if gridH <= 0 || gridW <= 0 || gridH%k != 0 || gridW%k != 0 {
		return fmt.Errorf("sim: vision: grid %dx%d is not a positive multiple of the %dx%d merge", gridH, gridW, k, k)
	}
	if want := gridH * gridW * 3 * b.o.PatchSize * b.o.PatchSize; len(patches) != want {
		return fmt.Errorf("sim: vision: %d floats of patches, a %dx%d grid needs %d", len(patches), gridH, gridW, want)
	}
	cost := b.o.Costs.VisionCost(gridH, gridW)
	step := b.clock.begin(cost)
	b.kept = &image{hash: hashPatches(patches), tokens: gridH * gridW / (k * k)}
	b.o.Meter.record(cost, b.clock.end(step, cost), 0, 0)
	return nil
}

// checkPrefill refuses a prefill the chip would refuse, before anything changes.
func (b *Backend) checkPrefill(slotID int, ids []int32) error {
	s := &b.slots[slotID]
	switch {
	case s.live:
		return fmt.Errorf("sim: prefill: slot %d is live; release it first", slotID)
	case len(ids) == 0:
		return errors.New("sim: prefill: empty prompt")
	case len(ids) > b.o.MaxSeqLen:
		return fmt.Errorf("sim: prefill: prompt of %d tokens is longer than max_seq_len %d", len(ids), b.o.MaxSeqLen)
	case b.kept == nil:
		return errors.New("sim: prefill: no image embeddings: run vision first")
	}
	imageTokens := 0
	for _, id := range ids {
		if id == b.o.ImageToken {
			imageTokens++
		}
	}
	if imageTokens != b.kept.tokens {
		return fmt.Errorf("sim: prefill: the prompt has %d image tokens, vision kept %d embeddings", imageTokens, b.kept.tokens)
	}
	return nil
}

// prefill reads the query from the checked prompt, plans the answer from it and the kept
// image into the slot, and takes the prefill cost of the padded prompt. The next token to
// predict is the answer's first (index 0).
func (b *Backend) prefill(slotID int, ids []int32) {
	cost := b.o.Costs.PrefillCost(PrefillLength(len(ids)))
	step := b.clock.begin(cost)
	q := readInstruction(b.instruction(ids))
	plan := append(b.o.Tokenizer.Encode(answerText(b.kept.hash, q)), b.o.EOS)
	b.slots[slotID] = slot{live: true, plan: plan, image: b.kept.hash, pos: len(ids), prompt: len(ids), lastPrompt: ids[len(ids)-1]}
	b.kept = nil // consumed, as on the chip
	b.o.Meter.record(cost, b.clock.end(step, cost), 1, 0)
}

// instruction is the text between </img> and the <|im_end|> after it: the user's
// instruction in the chat prompt package prompt builds.
func (b *Backend) instruction(ids []int32) string {
	from := -1
	for i, id := range ids {
		if id == b.imageEnd {
			from = i + 1
			break
		}
	}
	if from < 0 {
		return ""
	}
	to := from
	for to < len(ids) && ids[to] != b.imEnd {
		to++
	}
	return b.o.Tokenizer.Decode(ids[from:to])
}

// Release frees a slot; releasing a free slot is not an error.
func (b *Backend) Release(slotID int) error {
	if b.closed {
		return ErrClosed
	}
	if slotID < 0 || slotID >= len(b.slots) {
		return fmt.Errorf("sim: release: slot %d out of range 0..%d", slotID, len(b.slots)-1)
	}
	b.slots[slotID] = slot{}
	return nil
}

// Reset releases every slot and forgets the kept image.
func (b *Backend) Reset() error {
	if b.closed {
		return ErrClosed
	}
	clear(b.slots)
	b.kept = nil
	return nil
}

// Close makes the Backend unusable.
func (b *Backend) Close() error {
	b.closed = true
	b.slots, b.kept = nil, nil
	return nil
}
