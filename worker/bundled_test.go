package worker

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/provision"
)

// TestOpenEngineNamesTheBundledModel: with nothing configured and an empty Hugging Face
// cache the worker runs the bundled model, and /info says so instead of naming the
// LocateAnything-3B repository.
func TestOpenEngineNamesTheBundledModel(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	cfg := testEngineConfig(t)
	cfg.Weights.HubCache = t.TempDir() // no LocateAnything-3B snapshot there

	runtime.LockOSThread() // the native backend binds to its OS thread
	defer runtime.UnlockOSThread()
	eng, err := OpenEngine(context.Background(), cfg, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	in := eng.Info()
	if want := filepath.Join(root, provision.BundledModel); in.WeightsDir != want {
		t.Errorf("weights dir %q, want the bundled model %q", in.WeightsDir, want)
	}
	if in.Model != "tiny-shapes" || in.WeightsRepo != "" || in.WeightsRevision != "" {
		t.Errorf("bundled model reported as model %q, repo %q @ %q; want tiny-shapes and no repo", in.Model, in.WeightsRepo, in.WeightsRevision)
	}
}

// testEngineConfig is the worker's defaults, shrunk for quick engine tests.
func testEngineConfig(t *testing.T) config.Worker {
	t.Helper()
	cfg := defaultConfig(t)
	cfg.Threads, cfg.MaxSeqLen, cfg.MaxNewTokens, cfg.MaxNewTokensCap = 1, 512, 8, 64
	return cfg
}
