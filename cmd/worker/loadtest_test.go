package main

import (
	"bytes"
	"strings"
	"testing"
)

// The load test itself is tested in package bench/loadtest; this checks that the
// subcommand reaches it and that a bad command line, or a bad LA_SIM_* setting, exits 2.
func TestLoadtestSubcommandExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"loadtest", "--batch", "0"}, nil, "worker loadtest: --batch \"0\""},
		{[]string{"loadtest", "--images", "/nonexistent"}, nil, "worker loadtest: images:"},
		{[]string{"loadtest"}, map[string]string{"LA_SIM_SPEED": "0"}, "LA_SIM_SPEED is 0"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		var stdout, stderr bytes.Buffer
		if code := realMain(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q %v: exit %d, stderr %q; want exit 2 and %q", c.args, c.env, code, stderr.String(), c.want)
		}
	}
}
