package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestMisspeltVariableStopsEverySubcommand: a misspelt LA_* variable (LA_WEIGHTS_DRI)
// stops every subcommand with exit 2 and the name it meant, before any of them runs: the
// tool would otherwise run with the setting silently ignored (detect on the bundled model).
func TestMisspeltVariableStopsEverySubcommand(t *testing.T) {
	t.Setenv("LA_WEIGHTS_DRI", "/nope")
	image := "../../testdata/images/dog.jpg"
	for _, args := range [][]string{
		{"detect", "--image", image, "--query", "dog", "--max-new-tokens", "2"},
		{"tokenize", "--weights", tokenizerDir, "car"},
		{"bench", "--weights", "/nonexistent/ckpt"},
		{"preprocess", "--image", image, "--out", t.TempDir() + "/canon.png"},
		{"smoke", "--url", "http://127.0.0.1:1", "--image", image, "--query", "dog", "--wait", "1ms"},
		{"loadtest", "--images", "/nonexistent"},
		{"config"},
	} {
		var stdout, stderr bytes.Buffer
		code := realMain(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "LA_WEIGHTS_DRI: unknown; did you mean LA_WEIGHTS_DIR?") {
			t.Errorf("worker %q with LA_WEIGHTS_DRI set: exit %d, stderr %q; want exit 2 naming LA_WEIGHTS_DIR", args, code, stderr.String())
		}
	}
}
