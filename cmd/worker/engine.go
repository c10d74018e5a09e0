package main

import (
	"cmp"
	"context"
	"fmt"
	"os"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/extract"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/weights"
)

// openEngine opens the engine of one chip (cfg.ChipIndex) on the calling thread, which is
// the chip's owner thread (engine/chip). The weights come from LA_WEIGHTS_DIR, else the
// pinned LocateAnything-3B snapshot in the Hugging Face cache, else the bundled model.
func openEngine(ctx context.Context, cfg Config) (engine.Engine, error) {
	choice, err := defaultWeightsDir(cfg.WeightsDir)
	if err != nil {
		return nil, err
	}
	dir := choice.Dir
	opts := pipeline.OpenOptions{
		WeightsDir:      dir,
		Backend:         cfg.Engine,
		Threads:         cfg.Threads,
		MaxSeqLen:       cfg.MaxSeqLen,
		InTokenLimit:    cfg.InTokenLimit,
		CanonGrid:       cfg.CanonGrid,
		CanonAspect:     cfg.CanonAspect,
		MaxNewTokens:    cfg.MaxNewTokens,
		MaxNewTokensCap: cfg.MaxNewTokensCap,
	}
	if choice.Pinned {
		opts.WeightsRepo = weights.DefaultRepo
		opts.WeightsRevision = cmp.Or(os.Getenv("TT_WEIGHTS_REVISION"), weights.DefaultRevision)
	}
	switch cfg.Engine {
	case "cpu":
	case "ttnn":
		// The seed's first-boot step: tt_transformers loads a plain Qwen2 checkpoint,
		// extracted once from the snapshot (skipped when already there).
		eo, err := extract.OptionsFromEnv(os.Getenv)
		if err != nil {
			return nil, err
		}
		eo.Logger = cfg.Log
		res, err := extract.LLM(ctx, dir, eo)
		if err != nil {
			return nil, fmt.Errorf("extracting the LLM for the ttnn backend: %w", err)
		}
		opts.BackendOptions = map[string]string{"llm_dir": res.Dir}
		// The adapter reads the seed's knobs itself; report what it runs.
		opts.Precision = cmp.Or(os.Getenv("LA_PREC"), "accuracy")
		if os.Getenv("LA_TRACE") == "0" {
			opts.DecodeMode = "ar_greedy"
		}
	default:
		return nil, fmt.Errorf("LA_ENGINE=%q: want cpu or ttnn", cfg.Engine)
	}
	return pipeline.Open(opts)
}
