package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/locateanything/detect/bench/loadtest"
	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/cli"
)

// runLoadtest implements `worker loadtest`: the service's throughput on the simulated chip
// (package bench/loadtest, docs/throughput.md). It reads the worker's configuration like the
// worker does, so LA_SIM_* set the cost model; SIGINT stops it.
func runLoadtest(args []string, stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	log := newLogger(os.Stderr, cfg.Observe.LogFormat, config.LogWarn)
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return loadtest.Run(ctx, args, cfg, loadtest.Env{Stdout: stdout, Log: log, WorkDir: wd})
}
