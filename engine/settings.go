package engine

import (
	"runtime"

	"github.com/locateanything/detect/internal/settings"
)

// Settings are the engine's run-time knobs, declared once here: each field's `envconfig`
// tag is its variable, `default` its default and `desc` its meaning (package config embeds
// Settings in the worker's settings and reads them from the environment; the upstream
// server's knobs keep their names and meaning, docs/background.md). engine/pipeline opens
// an engine with them (pipeline.OpenOptions embeds Settings). Validate is the one check of
// the values; the methods below are the one derivation of each value whose 0 or empty
// means "derived", which the pipeline runs with and `worker config` shows. They live in
// this package, which links no backend, so that a program that only reads the
// configuration (submit) does not link the engine.
type Settings struct {
	Backend      BackendKind `envconfig:"LA_ENGINE" default:"cpu" desc:"backend: cpu, ttnn (Blackhole) or sim (a simulated p150a: the chip's time, no model)"`
	Threads      int         `envconfig:"LA_THREADS" default:"0" desc:"host threads of the cpu backend; 0 = one per core"`
	InTokenLimit int         `envconfig:"LA_IN_TOKEN_LIMIT" default:"0" desc:"image patches before the first resize shrinks the image; 0 = the checkpoint's, at most 1024 (1024 on sim)"`
	// CanonGrid is "native", "HxW", or "" (CanonGridSetting says what "" means).
	CanonGrid       string `envconfig:"LA_CANON_GRID" desc:"fixed vision grid HxW in patches, or native; empty = native on cpu, else derived from LA_CANON_ASPECT"`
	CanonAspect     string `envconfig:"LA_CANON_ASPECT" default:"1920x1080" desc:"WxH the canonical grid is derived from when LA_CANON_GRID is empty"`
	MaxSeqLen       int    `envconfig:"LA_MAX_SEQ_LEN" default:"4096" desc:"model context in tokens per sequence: prompt + budget must fit"`
	MaxBatch        int    `envconfig:"LA_MAX_BATCH" default:"8" desc:"sequences a chip decodes together, 1-32"`
	MaxNewTokens    int    `envconfig:"LA_MAX_NEW_TOKENS" default:"128" desc:"generation budget of a request that names none"`
	MaxNewTokensCap int    `envconfig:"LA_MAX_NEW_TOKENS_CAP" default:"1024" desc:"largest max_new_tokens a request may ask for"`
	// GenerationMode is how requests that name none are decoded: ar (one token per step,
	// the validated deployment's) or hybrid (parallel box decoding, docs/hybrid-decoding.md);
	// "" is ar.
	GenerationMode GenerationMode `envconfig:"LA_GENERATION_MODE" default:"ar" desc:"decoding of a request that names none: ar (one token per step) or hybrid (parallel box decoding)"`
	// WeightsQuant is the cpu backend's decoder and LM head weights: bf16 (the
	// checkpoint's, the exact path) or q8, the fast path (int8 blocks made at open, and
	// prefill and vision in bf16 on AMX or AVX512-BF16 where the CPU has either;
	// docs/cpu-backend.md); "" is bf16.
	WeightsQuant WeightsQuant `envconfig:"LA_WEIGHTS_QUANT" default:"bf16" desc:"cpu decoder weights: bf16 (the checkpoint's, exact) or q8 (int8 blocks made at open, faster)"`
}

// MaxBatchLimit is the most sequences one chip may decode together (tt_transformers'
// Generator serves at most 32 users per device).
const MaxBatchLimit = 32

// TTNNKVPositions is the ttnn backend's paged KV pool: 1024 blocks of 32 positions shared
// by every slot, the pool the port validated (engine/ttnn/la_ttnn_adapter.py,
// docs/ttnn-backend.md). LA_MAX_BATCH x LA_MAX_SEQ_LEN must fit it; the adapter would
// refuse at open, after the chip is up, so the settings refuse first.
const TTNNKVPositions = 1024 * 32

// ServedInTokenLimit is the image-token limit the validated deployment runs at (the real
// checkpoint says 25600, which on a CPU would take minutes per image). A checkpoint whose
// own limit is lower (the bundled small models) keeps its own.
const ServedInTokenLimit = 1024

// Validate reports every engine setting that makes no sense, each naming its variable.
func (s Settings) Validate() error {
	var v settings.Check
	add := v.Add
	if !BackendKinds.Has(s.Backend) {
		add("LA_ENGINE is %q, want one of %s", s.Backend, BackendKinds.List())
	}
	if s.WeightsQuant != "" && !WeightsQuants.Has(s.WeightsQuant) {
		add("LA_WEIGHTS_QUANT is %q, want one of %s", s.WeightsQuant, WeightsQuants.List())
	} else if s.WeightsQuant == WeightsQ8 && s.Backend != BackendCPU {
		add("LA_WEIGHTS_QUANT=q8 is a cpu backend setting (LA_ENGINE is %q)", s.Backend)
	}
	if s.MaxBatch < 1 || s.MaxBatch > MaxBatchLimit {
		add("LA_MAX_BATCH is %d, want 1..%d", s.MaxBatch, MaxBatchLimit)
	}
	if s.Backend == BackendTTNN && s.MaxBatch*s.MaxSeqLen > TTNNKVPositions {
		add("LA_MAX_BATCH x LA_MAX_SEQ_LEN is %d x %d = %d, more than the ttnn backend's paged KV pool of %d positions; lower one of them",
			s.MaxBatch, s.MaxSeqLen, s.MaxBatch*s.MaxSeqLen, TTNNKVPositions)
	}
	v.NotNegative("LA_THREADS", int64(s.Threads), "one per core")
	v.NotNegative("LA_IN_TOKEN_LIMIT", int64(s.InTokenLimit), "the checkpoint's, at most 1024")
	v.Positive("LA_MAX_SEQ_LEN", int64(s.MaxSeqLen))
	if !BudgetFits(s.MaxNewTokens, s.MaxNewTokensCap) {
		add("LA_MAX_NEW_TOKENS is %d, want 1..LA_MAX_NEW_TOKENS_CAP (%d)", s.MaxNewTokens, s.MaxNewTokensCap)
	}
	if !s.GenerationMode.Valid() {
		add("LA_GENERATION_MODE is %q, want one of %s", s.GenerationMode, GenerationModes.List())
	}
	return v.Err()
}

// BudgetFits is the default token budget's one rule: at least one token, no more than
// the cap (Settings.Validate refuses LA_MAX_NEW_TOKENS by it; pipeline.New guards by it).
func BudgetFits(def, limit int) bool { return def >= 1 && def <= limit }

// ThreadCount is the host threads the cpu backend runs with: LA_THREADS, or one per CPU
// this process may run on when it is 0.
func (s Settings) ThreadCount() int {
	if s.Threads > 0 {
		return s.Threads
	}
	return runtime.NumCPU()
}

// InTokens is the image-token limit the host side resizes for, given the checkpoint's own
// limit: LA_IN_TOKEN_LIMIT, or when it is 0 the checkpoint's, at most ServedInTokenLimit.
// The simulated chip stands in for the served model whatever checkpoint lends it a
// tokenizer, so on sim 0 means ServedInTokenLimit whatever the checkpoint says.
func (s Settings) InTokens(checkpoint int) int {
	switch {
	case s.InTokenLimit > 0:
		return s.InTokenLimit
	case s.Backend == BackendSim:
		return ServedInTokenLimit
	}
	return min(checkpoint, ServedInTokenLimit)
}

// CanonGridSetting is LA_CANON_GRID as the backend reads it: empty is native on the cpu
// engine, which builds nothing per grid, and derived from LA_CANON_ASPECT on the others
// (imageproc.ResolveCanonGrid).
func (s Settings) CanonGridSetting() string {
	if s.CanonGrid == "" && s.Backend == BackendCPU {
		return "native"
	}
	return s.CanonGrid
}
