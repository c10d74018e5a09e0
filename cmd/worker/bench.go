package main

import (
	"errors"
	"io"
	"os"

	"github.com/locateanything/detect/bench"
)

// runBench implements `worker bench`: the CPU backend's stages timed against the
// machine's own ceilings. The command lives in package bench (see bench.Run); an error of
// its command line becomes a usageError, so the worker exits 2 on it.
func runBench(args []string, stdout io.Writer) error {
	err := bench.Run(args, os.Getenv("LA_WEIGHTS_DIR"), stdout)
	if errors.Is(err, bench.ErrUsage) {
		return usageError{err}
	}
	return err
}
