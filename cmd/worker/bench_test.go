package main

import (
	"bytes"
	"strings"
	"testing"
)

// The bench itself is tested in package bench; this checks that the subcommand reaches
// it and that its exit code tells a bad command line (2) from a failed run (1).
func TestBenchSubcommandExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "--weights", ""}, 2, "worker bench: bench: --weights is required"},
		{[]string{"bench", "--weights", "x", "--tokens", "0"}, 2, "must be positive"},
		{[]string{"bench", "--weights", "/nonexistent/ckpt"}, 1, "worker bench: bench:"},
	} {
		var stdout, stderr bytes.Buffer
		if code := realMain(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
