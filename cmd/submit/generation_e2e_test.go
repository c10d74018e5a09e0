package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

// --generation-mode reaches the worker: a real worker (the jobs.Runner on the C engine and
// the block-trained test model) decodes every job of `submit --generation-mode hybrid` in
// hybrid mode, and each row of results.jsonl says so with its steps; without the flag the
// worker's default decodes them one token per step.
func TestEndToEndGenerationMode(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts NATS, versitygw and a worker on a test model")
	}
	root := t.TempDir()
	sys := startSystem(t, nil, systemOptions{fileRoot: root, engine: modelEngine("../../tools/refmodel/testdata/hybrid/tiny-shapes-blocks", 2, 48)})
	frames := filepath.Join(root, "frames")
	must(t, os.MkdirAll(frames, 0o755))
	for _, name := range []string{"03.png", "05.png"} {
		img, err := os.ReadFile(filepath.Join("../../tools/tinymodel/testdata/heldout", name))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(frames, name), img, 0o644))
	}

	for _, c := range []struct {
		args []string
		want engine.GenerationMode
	}{
		{[]string{"--generation-mode", "hybrid"}, engine.GenerationHybrid},
		{nil, engine.GenerationAR}, // the worker's default
	} {
		out := filepath.Join(root, "out-"+string(c.want))
		args := append([]string{"--out", out, "--query", "triangle"}, c.args...)
		code, stdout, _ := sys.submit(t, append(args, frames)...)
		if code != ExitOK || !strings.Contains(stdout, "2 submitted, 0 already done, 2 succeeded, 0 failed") {
			t.Fatalf("%v: exit %d, %q", c.args, code, stdout)
		}
		rows := readResults(t, out)
		if len(rows) != 2 {
			t.Fatalf("%v: %d rows, want 2", c.args, len(rows))
		}
		for _, r := range rows {
			switch {
			case r.GenerationMode != c.want:
				t.Errorf("%v: %s decoded in %q, want %q", c.args, r.File, r.GenerationMode, c.want)
			case c.want == engine.GenerationHybrid && (r.DecodeMode != "hybrid_greedy" || r.DecodeSteps < 1 || r.DecodeSteps >= r.NumGeneratedTokens-1):
				t.Errorf("%v: %s: %s in %d steps for %d tokens, want hybrid_greedy in fewer steps than tokens",
					c.args, r.File, r.DecodeMode, r.DecodeSteps, r.NumGeneratedTokens)
			case c.want == engine.GenerationAR && r.DecodeSteps != r.NumGeneratedTokens-1:
				t.Errorf("%v: %s: %d steps for %d tokens, want one per token after the first", c.args, r.File, r.DecodeSteps, r.NumGeneratedTokens)
			}
		}
	}
}
