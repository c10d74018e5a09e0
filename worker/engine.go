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
// thread (engine/chip): Open with the service's setup.
func OpenEngine(ctx context.Context, cfg config.Worker, chip int, log *slog.Logger) (engine.Engine, error) {
	return Open(ctx, cfg, log, Setup{})
}

// MeteredOpener is OpenEngine with the device time of each simulated chip (LA_ENGINE=sim)
// added to meters[chip]: what `worker loadtest` measures the device's busy time with.
func MeteredOpener(meters []*sim.Meter) EngineOpener {
	return func(ctx context.Context, cfg config.Worker, chip int, log *slog.Logger) (engine.Engine, error) {
		if chip >= len(meters) {
			return nil, fmt.Errorf("chip %d has no meter (%d given)", chip, len(meters))
		}
		return Open(ctx, cfg, log, Setup{Meter: meters[chip]})
	}
}

// Setup is what Open needs besides the configuration.
type Setup struct {
	// BundledDir is where the binary's own copy of the bundled model is unpacked when no
	// checkout holds one; "" means LA_DATA_DIR/bundled, the service's place. A tool passes
	// a directory of its own (the system's temporary one), so that it writes nothing where
	// it is run.
	BundledDir string
	// Meter, when set, is what a simulated chip's device time (LA_ENGINE=sim) is added to.
	Meter *sim.Meter
}

// ChooseWeights picks the checkpoint cfg names by provision.Choose's rules: LA_WEIGHTS_DIR
// (or its alias LA_MODEL_PATH), else the pinned snapshot in the Hugging Face cache (or from
// the Hub with LA_DOWNLOAD), else the bundled model. Every program that runs the model picks
// its weights here, so the same environment runs the same model everywhere.
func ChooseWeights(ctx context.Context, cfg config.Worker, s Setup) (provision.Choice, error) {
	bundled := s.BundledDir
	if bundled == "" {
		bundled = filepath.Join(cfg.DataDir, "bundled")
	}
	return provision.Choose(ctx, provision.Request{
		Dir: cfg.Weights.Directory(), Hub: cfg.Weights.Hub(), Bundled: provision.Bundled(bundled),
	})
}

// Open opens an engine on the calling thread (native backends bind to it) with cfg's
// engine settings (LA_ENGINE, LA_WEIGHTS_QUANT, LA_MAX_SEQ_LEN, ...) on the weights
// ChooseWeights picks, through pipeline.Open. Each chip of the service, `worker detect`
// and `worker loadtest` open theirs here; `worker bench`, which times the cpu backend on
// its own, calls pipeline.Open with the same settings (package bench).
func Open(ctx context.Context, cfg config.Worker, log *slog.Logger, s Setup) (engine.Engine, error) {
	if err := CheckDevice(cfg); err != nil {
		return nil, err
	}
	choice, err := ChooseWeights(ctx, cfg, s)
	if err != nil {
		return nil, err
	}
	log.Info("weights chosen", "dir", choice.Dir, "model", choice.Model, "why", choice.Reason)
	opts := pipeline.OpenOptions{
		Settings:   cfg.Engine.Settings,
		WeightsDir: choice.Dir, ModelName: choice.Model, WeightsRepo: choice.Repo, WeightsRevision: choice.Revision,
	}
	opts.Sim, opts.SimMeter = cfg.Sim, s.Meter
	if cfg.Engine.Backend == engine.BackendTTNN {
		if err := ttnnOptions(ctx, &opts, cfg, log); err != nil {
			return nil, err
		}
	}
	return pipeline.Open(opts)
}

// CheckDevice fails, in one line ("no Blackhole device found: ..."), when cfg's backend
// needs a chip the host does not have: LA_ENGINE=ttnn without a node in /dev/tenstorrent/
// (ttnn.Config.CheckDevice). It comes before anything that reads, downloads or writes, in
// the service and in each subcommand that opens the engine; other backends need no chip.
func CheckDevice(cfg config.Worker) error {
	if cfg.Engine.Backend != engine.BackendTTNN {
		return nil
	}
	return cfg.TTNN.CheckDevice()
}

// ttnnOptions does the upstream server's first-boot step (tt_transformers loads a plain
// Qwen2 checkpoint, extracted once from the snapshot and reused afterwards) and hands the
// adapter every knob it runs with, the canonical grid the host side resizes for included,
// so the two can never disagree.
func ttnnOptions(ctx context.Context, opts *pipeline.OpenOptions, cfg config.Worker, log *slog.Logger) error {
	eo := cfg.Extract
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
