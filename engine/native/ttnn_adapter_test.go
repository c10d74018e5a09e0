package native

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/extract"
)

// TestTTNNAdapterUnitTests runs the TT-NN adapter's Python unit tests (settings, knobs,
// protocol surface): everything of it that needs no chip.
func TestTTNNAdapterUnitTests(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	cmd := exec.Command(python, "-m", "unittest", "-v", "test_la_ttnn_adapter")
	cmd.Dir = "../ttnn"
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m unittest: %v\n%s", python, err, out)
	}
	if !strings.Contains(string(out), "OK") {
		t.Fatalf("unexpected unittest output:\n%s", out)
	}
}

// TestTTNNRealAdapterWithoutChip opens the real adapter (the default module) through the
// bridge on a host without ttnn, after the first-boot extraction: the configuration and
// file checks pass and open fails with the clear missing-stack error, not a crash.
func TestTTNNRealAdapterWithoutChip(t *testing.T) {
	lockThread(t)
	snapshot := filepath.Join(checkpointsDir, "tiny-f32")
	res, err := extract.LLM(context.Background(), snapshot, extract.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m := openModel(t, snapshot)
	dir, err := filepath.Abs("../ttnn")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LA_CANON_GRID", "")
	_, err = Open("ttnn", m, Options{MaxSeqLen: 4096, BackendOptions: map[string]string{"path": dir, "llm_dir": res.Dir}})
	wantError(t, err, "adapter open: RuntimeError: the TT-NN stack is not importable", "la_ttnn_adapter.py:")

	// Without the extraction the adapter says what to do.
	_, err = Open("ttnn", m, Options{MaxSeqLen: 4096, BackendOptions: map[string]string{"path": dir, "llm_dir": t.TempDir()}})
	wantError(t, err, "FileNotFoundError: extracted LLM missing", "first-boot extraction")
}
