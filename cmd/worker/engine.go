package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/locateanything/detect/engine"
)

// openEngine opens the engine of one chip (cfg.ChipIndex). It is the one place the worker
// learns what engine it drives; the real engine is wired in here. It runs on the chip's
// owner thread.
func openEngine(ctx context.Context, cfg Config) (engine.Engine, error) {
	_ = ctx
	if cfg.WeightsDir == "" {
		return nil, errors.New("no engine configured: set LA_WEIGHTS_DIR (or LA_MODEL_PATH) to the LocateAnything-3B checkpoint directory and LA_ENGINE (cpu or ttnn)")
	}
	return nil, fmt.Errorf("engine %q is not built into this worker yet (LA_WEIGHTS_DIR=%s)", cfg.Engine, cfg.WeightsDir)
}
