package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/provision"
)

// chooseWeights picks the checkpoint for a tool (detect, bench): the --weights flag when
// given, else what the worker would run by the same rules (provision.Choose) with the
// weights part of the environment. Outside a checkout the bundled model is the binary's
// own copy, unpacked under the system's temporary directory.
func chooseWeights(ctx context.Context, flagDir string) (provision.Choice, error) {
	var w config.Weights
	if err := envconfig.Process("", &w); err != nil {
		return provision.Choice{}, fmt.Errorf("configuration: %w", err)
	}
	dir := w.Directory()
	if flagDir != "" {
		dir = flagDir
	}
	return provision.Choose(ctx, provision.Request{Dir: dir, Hub: w.Hub(), Bundled: provision.Bundled(filepath.Join(os.TempDir(), "la-bundled"))})
}
