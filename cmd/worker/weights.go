package main

import (
	"os"
	"path/filepath"

	"github.com/locateanything/detect/worker"
)

// toolSetup is how the tools choose the weights (detect, tokenize and bench, through
// worker.ChooseWeights) and open the engine (detect, through worker.Open): as the service
// does, but with the binary's
// own copy of the bundled model unpacked under the system's temporary directory rather
// than LA_DATA_DIR, so that a tool writes nothing in the directory it is run from.
func toolSetup() worker.Setup {
	return worker.Setup{BundledDir: filepath.Join(os.TempDir(), "la-bundled")}
}
