package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBinaryRunsTheEmbeddedModelAnywhere builds the worker, copies it into an empty
// directory far from the checkout, and runs a detection there with no weights configured
// and an empty Hugging Face cache: the model embedded in the binary answers.
func TestBinaryRunsTheEmbeddedModelAnywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker binary")
	}
	image, err := filepath.Abs("../../testdata/images/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	bin := filepath.Join(root, "bin", "worker")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	work, tmp := filepath.Join(root, "empty"), filepath.Join(root, "tmp")
	for _, d := range []string{work, tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "detect", "--image", image, "--query", "red circle", "--max-new-tokens", "16", "--threads", "1")
	cmd.Dir = work
	cmd.Env = []string{"HOME=" + root, "HF_HUB_CACHE=" + filepath.Join(root, "hf"), "TMPDIR=" + tmp, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("worker detect from %s: %v\n%s", work, err, stderr)
	}
	var answer struct {
		RawText            string `json:"raw_text"`
		NumGeneratedTokens int    `json:"num_generated_tokens"`
	}
	if err := json.Unmarshal(out, &answer); err != nil || answer.NumGeneratedTokens == 0 {
		t.Fatalf("answer %q: %v", out, err)
	}
	unpacked, _ := filepath.Glob(filepath.Join(tmp, "la-bundled", "*", "tiny-shapes", "model.safetensors"))
	if len(unpacked) != 1 {
		t.Fatalf("the embedded model was not unpacked under TMPDIR: %v", unpacked)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 0 {
		t.Errorf("detect wrote into the working directory: %v", entries)
	}
}
