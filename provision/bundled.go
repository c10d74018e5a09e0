package provision

import (
	"os"
	"path/filepath"
)

// BundledModel is where the small trained checkpoint shipped in the repository lives
// (docs/tiny-model.md), relative to a checkout: it runs when no weights are configured and
// no LocateAnything-3B snapshot is in the Hugging Face cache, so that the worker finds real
// things (coloured shapes) on a fresh machine.
const BundledModel = "models/tiny-shapes"

// FindBundled looks for the bundled model under the working directory and under the
// executable's parent directories (bin/worker in a checkout), and returns its absolute path.
func FindBundled() (string, bool) {
	candidates := []string{BundledModel}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(dir, BundledModel), filepath.Join(dir, "..", BundledModel))
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "config.json")); err == nil {
			if abs, err := filepath.Abs(c); err == nil {
				return abs, true
			}
			return c, true
		}
	}
	return "", false
}
