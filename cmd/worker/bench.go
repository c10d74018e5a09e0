package main

import (
	"context"
	"fmt"
	"io"

	"github.com/locateanything/detect/bench"
	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/worker"
)

// runBench implements `worker bench`: the CPU backend's stages timed against the
// machine's own ceilings. The command lives in package bench (see bench.Run); it runs on
// the worker's configuration: without --weights the checkpoint the worker would run
// (worker.ChooseWeights), and the engine opened as the service opens it (pipeline.Open
// with the worker's engine settings), LA_WEIGHTS_QUANT, LA_THREADS and LA_MAX_SEQ_LEN
// being the defaults of --quant, --threads and --max-seq-len. An error of its command line or configuration exits 2.
func runBench(args []string, stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	if cfg.Engine.Backend != engine.BackendCPU {
		return cli.UsageError{Err: fmt.Errorf("bench times the cpu engine, and LA_ENGINE is %q", cfg.Engine.Backend)}
	}
	return bench.Run(args, benchDefaults(cfg), stdout)
}

// benchDefaults are the bench's flag defaults from the worker's configuration.
func benchDefaults(cfg config.Worker) bench.Defaults {
	return bench.Defaults{
		Weights: func() (string, error) {
			choice, err := worker.ChooseWeights(context.Background(), cfg, toolSetup())
			return choice.Dir, err
		},
		Settings: cfg.Engine.Settings,
	}
}
