package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
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
	if want := filepath.Join(root, bundledModel); got.Dir != want || got.Pinned {
		t.Fatalf("default weights %+v, want the bundled model %q, not pinned", got, want)
	}
	if _, err := os.Stat(filepath.Join(got.Dir, "model.safetensors")); err != nil {
		t.Fatalf("bundled model has no weights: %v", err)
	}
	if got, _ := defaultWeightsDir("/explicit"); got.Dir != "/explicit" || !got.Pinned {
		t.Fatalf("an explicit directory must win and count as the pinned checkpoint, got %+v", got)
	}

	// /info must not name the LocateAnything-3B repository for the bundled model.
	runtime.LockOSThread() // the native backend binds to its OS thread
	defer runtime.UnlockOSThread()
	eng, err := openEngine(context.Background(), Config{Engine: "cpu", Threads: 1, MaxSeqLen: 512,
		MaxNewTokens: 8, MaxNewTokensCap: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if in := eng.Info(); in.WeightsDir != got.Dir || in.WeightsRepo != "" || in.WeightsRevision != "" {
		t.Fatalf("bundled model reported as dir %q, repo %q @ %q; want its own dir and no repo", in.WeightsDir, in.WeightsRepo, in.WeightsRevision)
	}
}
