package main

import (
	"fmt"
	"io"
	"os"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/cli"
)

// loadConfig reads the worker's configuration from the environment (the only place it is
// read), refuses unknown LA_* variables, and resolves and validates the result.
func loadConfig() (config.Worker, error) {
	var c config.Worker
	if err := config.Unknown(os.Environ(), knownVariables()); err != nil {
		return config.Worker{}, fmt.Errorf("configuration: %w", err)
	}
	if err := envconfig.Process("", &c); err != nil {
		return config.Worker{}, fmt.Errorf("configuration: %w", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		return config.Worker{}, fmt.Errorf("configuration: working directory: %w", err)
	}
	if err := c.Finish(wd); err != nil {
		return config.Worker{}, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// knownVariables are the LA_* names the worker accepts in its environment: its own, the
// submit CLI's (they often share a shell) and those of the project's other tools.
func knownVariables() []string {
	return append(config.Names(config.Worker{}, config.Submit{}), config.OtherTools()...)
}

// runConfig implements `worker config`: the effective configuration, each value with where
// it came from, secrets redacted; exit 2 (through the error) when it does not load.
func runConfig(args []string, stdout io.Writer) error {
	if cli.AsksHelp(args) {
		return flagError(cli.ErrHelp, configHelp, stdout)
	}
	if len(args) > 0 {
		return cli.UsageError{Err: fmt.Errorf("config takes no arguments, got %q", args)}
	}
	cfg, err := loadConfig()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	return config.Print(stdout, cfg.Effective(os.Environ()))
}
