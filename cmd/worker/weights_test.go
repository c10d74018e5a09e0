package main

import (
	"os"
	"path/filepath"
	"testing"
)

// randomCheckpoint is the small random-weight checkpoint with PyTorch goldens that the
// engine's parity tests use: the tests here need a model that runs, not one that finds.
const randomCheckpoint = "testdata/checkpoints/tiny-bf16"

func TestDefaultWeightsDirFallsBackToTheBundledModel(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LA_WEIGHTS_DIR", "")
	t.Setenv("LA_MODEL_PATH", "")
	t.Setenv("LA_DOWNLOAD", "")
	t.Setenv("HF_HUB_CACHE", t.TempDir()) // no LocateAnything-3B snapshot there
	t.Chdir(root)
	got, err := defaultWeightsDir("")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, bundledModel); got != want {
		t.Fatalf("default weights %q, want the bundled model %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(got, "model.safetensors")); err != nil {
		t.Fatalf("bundled model has no weights: %v", err)
	}
	if got, _ := defaultWeightsDir("/explicit"); got != "/explicit" {
		t.Fatalf("an explicit directory must win, got %q", got)
	}
}
