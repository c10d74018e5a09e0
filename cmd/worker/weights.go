package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/locateanything/detect/engine/weights"
)

// bundledModel is the small trained checkpoint shipped in the repository (docs/tiny-model.md),
// used when no weights are configured and no LocateAnything-3B snapshot is in the Hugging
// Face cache, so that the worker finds real things (coloured shapes) on a fresh machine.
const bundledModel = "models/tiny-shapes"

// weightsChoice is the checkpoint directory the worker runs and where it came from.
type weightsChoice struct {
	Dir string
	// Pinned: the directory is the pinned LocateAnything-3B snapshot, or was named by
	// LA_WEIGHTS_DIR (taken to be a copy of it, as in the seed), so /info may name the
	// repository and revision. False for the bundled model, which is neither.
	Pinned bool
}

// defaultWeightsDir picks the checkpoint directory: dir when given, else the pinned
// LocateAnything-3B snapshot from the Hugging Face cache (or the Hub, with LA_DOWNLOAD=1),
// else the bundled model found next to the working directory or the executable.
func defaultWeightsDir(dir string) (weightsChoice, error) {
	if dir != "" {
		return weightsChoice{Dir: dir, Pinned: true}, nil
	}
	opts := weights.OptionsFromEnv(os.Getenv)
	resolved, err := weights.Resolve(context.Background(), opts)
	if err == nil {
		return weightsChoice{Dir: resolved, Pinned: true}, nil
	}
	if bundled, ok := findBundledModel(); ok {
		return weightsChoice{Dir: bundled}, nil
	}
	return weightsChoice{}, fmt.Errorf("no weights: %w (and no bundled model at %s)", err, bundledModel)
}

// findBundledModel looks for the bundled model under the working directory and under the
// executable's parent directories (bin/worker in a checkout).
func findBundledModel() (string, bool) {
	candidates := []string{bundledModel}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(dir, bundledModel), filepath.Join(dir, "..", bundledModel))
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "config.json")); err == nil {
			abs, err := filepath.Abs(c)
			if err != nil {
				return c, true
			}
			return abs, true
		}
	}
	return "", false
}
