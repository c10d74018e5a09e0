package main

import (
	"io"

	"github.com/locateanything/detect/bench"
)

// runBench implements `worker bench`: the CPU backend's stages timed against the
// machine's own ceilings. The command lives in package bench; see bench.Run.
func runBench(args []string, stdout io.Writer) error {
	return bench.Run(args, stdout)
}
