package engine

import (
	"context"
	"image"

	"github.com/locateanything/detect/internal/settings"
)

// Task picks the query template (docs/background.md, "Tasks and query templates").
type Task string

const (
	TaskDetect    Task = "detect"     // query is a category list joined by </c>
	TaskGround    Task = "ground"     // all instances matching a phrase
	TaskGroundOne Task = "ground_one" // a single instance matching a phrase
	TaskPoint     Task = "point"      // point to a phrase
	TaskText      Task = "text"       // text referred as a phrase ("" = all text)
	TaskRegion    Task = "region"     // GUI region matching a phrase
)

// Tasks lists every task in documentation order.
var Tasks = settings.Set[Task]{TaskDetect, TaskGround, TaskGroundOne, TaskPoint, TaskText, TaskRegion}

// Valid reports whether t names a known task.
func (t Task) Valid() bool { return Tasks.Has(t) }

// GenerationMode is how the decoder writes an answer (docs/hybrid-decoding.md).
type GenerationMode string

const (
	// GenerationAR writes one token per decode step: the validated deployment's behaviour.
	GenerationAR GenerationMode = "ar"
	// GenerationHybrid is the model's Parallel Box Decoding: a block of six positions per
	// step, a whole box accepted at once when the block is confident, one token per step
	// otherwise until the box is finished.
	GenerationHybrid GenerationMode = "hybrid"
)

// GenerationModes lists every generation mode, the default first.
var GenerationModes = settings.Set[GenerationMode]{GenerationAR, GenerationHybrid}

// Valid reports whether m names a known generation mode.
func (m GenerationMode) Valid() bool { return GenerationModes.Has(m) }

// BackendKind names a backend (LA_ENGINE): what runs the model.
type BackendKind string

const (
	// BackendCPU is the model in C on the host (engine/native, cpu_*.c).
	BackendCPU BackendKind = "cpu"
	// BackendTTNN drives a Blackhole chip through the Python adapter (engine/native, ttnn_*.c).
	BackendTTNN BackendKind = "ttnn"
	// BackendSim is a simulated p150a: the chip's time, no model (engine/sim).
	BackendSim BackendKind = "sim"
)

// BackendKinds lists every backend, the default first.
var BackendKinds = settings.Set[BackendKind]{BackendCPU, BackendTTNN, BackendSim}

// WeightsQuant is how the cpu backend holds the decoder's and LM head's weights
// (LA_WEIGHTS_QUANT; docs/cpu-backend.md).
type WeightsQuant string

const (
	// WeightsBF16 keeps the checkpoint's own weights: the exact path. The default; "" means
	// it too.
	WeightsBF16 WeightsQuant = "bf16"
	// WeightsQ8 converts them at open to int8 blocks of 32 with one scale each: the fast
	// path, a cpu backend option.
	WeightsQ8 WeightsQuant = "q8"
)

// WeightsQuants lists every weights quantization, the default first.
var WeightsQuants = settings.Set[WeightsQuant]{WeightsBF16, WeightsQ8}

// MaxQueryChars is the longest query, in characters, that the contract accepts (the
// upstream server's limit; /predict and jobs alike).
const MaxQueryChars = 1000

// Request is one image and one query.
type Request struct {
	Image        []byte // encoded PNG, JPEG, GIF or WebP
	Query        string
	Task         Task // "" means TaskDetect
	MaxNewTokens int  // 0 means the engine's default; above the cap is an InputError
	// GenerationMode "" means the engine's default (LA_GENERATION_MODE).
	GenerationMode GenerationMode
}

// Prepared is a request after all host work that precedes the device: decoded,
// preprocessed, tokenized. It is a plain value: a test double may build one by hand.
type Prepared struct {
	Request Request
	Image   image.Image // the decoded original, for the overlay

	Width, Height  int       // original size
	CanonW, CanonH int       // size of what the model sees
	GridH, GridW   int       // in 14-px patches
	Patches        []float32 // [GridH*GridW, 3, 14, 14], normalized
	PromptIDs      []int32   // chat prompt with one image token per image embedding
	NumImageTokens int
	MaxNewTokens   int            // resolved budget
	GenerationMode GenerationMode // resolved mode
	Warnings       []string       // what looks wrong with the query though it runs (prompt.QueryWarnings)

	PreprocessMS float64 // decode + resize + normalize + patchify + tokenize
}

// Engine is what a worker and the HTTP shim need from a model. Prepare may run on any
// goroutine and concurrently with Generate; Generate must be called by one goroutine at a
// time (the chip's owner).
type Engine interface {
	// Prepare does the host work. Bad input returns an *InputError.
	Prepare(ctx context.Context, req Request) (*Prepared, error)
	// Generate runs vision, prefill and the greedy decode loop on the device and parses
	// the answer. It checks ctx between decode steps; a cancelled ctx returns an error
	// wrapping ctx.Err().
	Generate(ctx context.Context, p *Prepared) (*Prediction, error)
	// Overlay draws the prediction on the original image and encodes it as PNG.
	Overlay(p *Prepared, pred *Prediction) ([]byte, error)
	// Info describes the model, backend and limits (for /info and logs).
	Info() Info
	// Close releases the device.
	Close() error
}

// Info describes a loaded engine.
type Info struct {
	Model      string      `json:"model"`       // "LocateAnything-3B"
	Backend    BackendKind `json:"backend"`     // LA_ENGINE: cpu, ttnn or sim (a test double names itself)
	Device     string      `json:"device"`      // human description of the device
	DecodeMode string      `json:"decode_mode"` // ar_greedy_trace | ar_greedy
	// GenerationModes are the modes this model can decode in (hybrid needs the block
	// token ids in its config.json); nil from an engine that does not say.
	GenerationModes []GenerationMode `json:"generation_modes,omitempty"`
	Precision       string           `json:"precision"`
	WeightsDir      string           `json:"weights_dir"`
	WeightsRepo     string           `json:"weights_repo"`
	WeightsRevision string           `json:"weights_revision"`
	CanonicalGrid   [2]int           `json:"canonical_grid"` // [h, w]; [0, 0] = native grid per image
	InTokenLimit    int              `json:"in_token_limit"`
	MaxSeqLen       int              `json:"max_seq_len"`
	MaxNewTokens    int              `json:"max_new_tokens"`
	MaxNewTokensCap int              `json:"max_new_tokens_cap"`
	MaxQueryChars   int              `json:"max_query_chars"`
	// Simulated says the engine is the simulated chip (LA_ENGINE=sim): its answers are
	// made up (Prediction.Simulated).
	Simulated bool `json:"simulated,omitempty"`
}
