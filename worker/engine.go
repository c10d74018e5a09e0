package worker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/provision"
	"github.com/locateanything/detect/provision/extract"
)

// OpenEngine opens the engine of one chip on the calling thread, which is the chip's owner
// thread (engine/chip), with the weights provision.Choose picks.
func OpenEngine(ctx context.Context, cfg config.Worker, chip int, log *slog.Logger) (engine.Engine, error) {
	return openEngine(ctx, cfg, log, nil)
}

// MeteredOpener is OpenEngine with the device time of each simulated chip (LA_ENGINE=sim)
// added to meters[chip]: what `worker loadtest` measures the device's busy time with.
func MeteredOpener(meters []*sim.Meter) EngineOpener {
	return func(ctx context.Context, cfg config.Worker, chip int, log *slog.Logger) (engine.Engine, error) {
		if chip >= len(meters) {
			return nil, fmt.Errorf("chip %d has no meter (%d given)", chip, len(meters))
		}
		return openEngine(ctx, cfg, log, meters[chip])
	}
}

func openEngine(ctx context.Context, cfg config.Worker, log *slog.Logger, meter *sim.Meter) (engine.Engine, error) {
	choice, err := provision.Choose(ctx, provision.Request{
		Dir: cfg.Weights.Directory(), Hub: cfg.Weights.Hub(), Bundled: provision.Bundled(filepath.Join(cfg.DataDir, "bundled")),
	})
	if err != nil {
		return nil, err
	}
	log.Info("weights chosen", "dir", choice.Dir, "model", choice.Model, "why", choice.Reason)
	opts := EngineOptions(cfg.Engine, choice)
	opts.Sim, opts.SimMeter = cfg.Sim, meter
	if cfg.Engine.Backend == "ttnn" {
		if err := ttnnOptions(ctx, &opts, cfg, log); err != nil {
			return nil, err
		}
	}
	return pipeline.Open(opts)
}

// EngineOptions are the native engine's options for the chosen weights (what `worker
// detect` and `worker bench` use too).
func EngineOptions(e config.Engine, choice provision.Choice) pipeline.OpenOptions {
	return pipeline.OpenOptions{
		WeightsDir:      choice.Dir,
		ModelName:       choice.Model,
		WeightsRepo:     choice.Repo,
		WeightsRevision: choice.Revision,
		Backend:         e.Backend,
		WeightsQuant:    e.WeightsQuant,
		Threads:         e.Threads,
		MaxSeqLen:       e.MaxSeqLen,
		MaxBatch:        e.MaxBatch,
		InTokenLimit:    e.InTokenLimit,
		CanonGrid:       e.CanonGrid,
		CanonAspect:     e.CanonAspect,
		MaxNewTokens:    e.MaxNewTokens,
		MaxNewTokensCap: e.MaxNewTokensCap,
		GenerationMode:  engine.GenerationMode(e.GenerationMode),
	}
}

// ttnnOptions does the upstream server's first-boot step (tt_transformers loads a plain
// Qwen2 checkpoint, extracted once from the snapshot and reused afterwards) and hands the
// adapter every knob it runs with, the canonical grid the host side resizes for included,
// so the two can never disagree.
func ttnnOptions(ctx context.Context, opts *pipeline.OpenOptions, cfg config.Worker, log *slog.Logger) error {
	eo := cfg.TTNN.Extract()
	eo.Logger = log
	res, err := extract.LLM(ctx, opts.WeightsDir, eo)
	if err != nil {
		return fmt.Errorf("extracting the LLM for the ttnn backend: %w", err)
	}
	opts.BackendOptions = cfg.TTNN.AdapterOptions(res.Dir) // the pipeline adds canon_grid
	opts.Precision = cfg.TTNN.Precision
	if !cfg.TTNN.Trace {
		opts.DecodeMode = "ar_greedy"
	}
	return nil
}
