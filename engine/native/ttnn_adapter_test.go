package native

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/provision/extract"
)

// TestTTNNAdapterUnitTests runs the TT-NN adapter's Python unit tests (settings, knobs,
// protocol surface): everything of it that needs no chip; and the stand-in's (its step).
func TestTTNNAdapterUnitTests(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	cmd := exec.Command(python, "-m", "unittest", "-v", "test_la_ttnn_adapter", "test_la_ttnn_standin")
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

// realAdapterOptions are the option lines the worker passes the real adapter, at its
// configuration's defaults (package config), with the grid the pipeline adds.
func realAdapterOptions(dir, llmDir string, extra ...string) map[string]string {
	o := map[string]string{
		"python_lib": "", "adapter": "la_ttnn_adapter", "path": dir, "python_site": "", "llm_dir": llmDir,
		"canon_grid": "24x44", "precision": "accuracy", "trace": "1", "trace_region_size": "50000000",
		"warmup_runs": "2", "warmup_decode_steps": "4", "mesh_shape": "1x1", "device_id": "",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		o[extra[i]] = extra[i+1]
	}
	return o
}

// TestTTNNRealAdapterWithoutChip opens the real adapter through the bridge on a host
// without ttnn, after the first-boot extraction: the settings (from the option lines, not
// the environment) are checked first, and open then fails in one line saying no Blackhole
// device was found (a host with a chip's device node but without ttnn: the clear
// missing-stack error), not a crash.
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
	open := func(o map[string]string) error {
		_, err := Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 4096, BackendOptions: o})
		return err
	}
	// Variables the adapter would refuse, had it read the environment.
	for name, value := range map[string]string{
		"LA_CANON_GRID": "native", "LA_PREC": "fast", "LA_TRACE": "maybe", "LA_WARMUP_RUNS": "0",
		"TT_MESH_SHAPE": "8x4", "TT_DEVICE_ID": "x", "LA_PYTHON_SITE": "/no/such/site", "LA_LLM_DIR": t.TempDir(),
	} {
		t.Setenv(name, value)
	}
	if !hasDeviceNode(t) {
		// No chip: that is the whole message, in one line, before the files and imports.
		for _, llm := range []string{res.Dir, t.TempDir()} {
			err := open(realAdapterOptions(dir, llm))
			wantError(t, err, "adapter open: RuntimeError: no Blackhole device found: no device node in /dev/tenstorrent/")
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the no-chip error spans lines: %q", err)
			}
		}
	} else {
		wantError(t, open(realAdapterOptions(dir, res.Dir)),
			"adapter open: RuntimeError: the TT-NN stack is not importable", "la_ttnn_adapter.py:")

		// Without the extraction the adapter says what to do.
		wantError(t, open(realAdapterOptions(dir, t.TempDir())), "FileNotFoundError: extracted LLM missing", "first-boot extraction")
	}

	// A knob the worker did not pass, or a grid the chip cannot run, is a clear error.
	o := realAdapterOptions(dir, res.Dir)
	delete(o, "precision")
	wantError(t, open(o), "ValueError: no precision option: the worker passes LA_PREC as option precision")
	wantError(t, open(realAdapterOptions(dir, res.Dir, "canon_grid", "native")),
		"ValueError: LA_CANON_GRID=native: the ttnn backend needs a fixed grid HxW")
}

// hasDeviceNode says whether this host has a Tenstorrent chip's device node, which changes
// the first error a chip-less open gives.
func hasDeviceNode(t *testing.T) bool {
	t.Helper()
	entries, err := os.ReadDir("/dev/tenstorrent")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			return true
		}
	}
	return false
}

// TestTTNNAdapterNotFoundWithoutChip: on a host without a chip, an adapter module the
// bridge cannot import (LA_ENGINE=ttnn with no LA_TTNN_PATH) fails in one line that says no
// Blackhole device was found and names what was looked for, rather than only Python's
// "No module named ...".
func TestTTNNAdapterNotFoundWithoutChip(t *testing.T) {
	if hasDeviceNode(t) {
		t.Skip("this host has a /dev/tenstorrent node")
	}
	lockThread(t)
	m := openModel(t, tinyCheckpoint{dtype: checkpoint.F32}.write(t))
	_, err := Open("ttnn", m, Options{MaxBatch: 1, MaxSeqLen: 64,
		BackendOptions: adapterOptions("la_no_such_adapter", t.TempDir())})
	wantError(t, err, "no Blackhole device found: no device node in /dev/tenstorrent/, and importing adapter "+
		"module la_no_such_adapter", "ModuleNotFoundError: No module named 'la_no_such_adapter'")
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the no-chip error spans lines: %q", err)
	}
}
