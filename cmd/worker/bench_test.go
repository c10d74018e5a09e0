package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/locateanything/detect/bench"
)

// The bench itself is tested in package bench; this checks that the subcommand reaches
// it on the worker's configuration and that its exit code tells a bad command line or
// configuration (2) from a failed run (1).
func TestBenchSubcommandExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"bench", "--weights", "x", "--tokens", "0"}, nil, 2, "must be positive"},
		{[]string{"bench", "--weights", "/nonexistent/ckpt"}, nil, 1, "worker bench: bench:"},
		{[]string{"bench", "--weights", "x", "--quant", "q4"}, nil, 2, `--quant "q4"`},
		// LA_MAX_SEQ_LEN is the KV cache the bench opens, as the worker does: runs that do not fit are refused.
		{[]string{"bench", "--weights", "x", "--prompt", "40", "--tokens", "30"}, map[string]string{"LA_MAX_SEQ_LEN": "64"}, 2,
			"the runs append 71 positions to each sequence (--prompt, --tokens, --runs, --batch), more than --max-seq-len 64 (LA_MAX_SEQ_LEN)"},
		// The configuration's quant is --quant's default, validated as the worker does.
		{[]string{"bench", "--weights", "x"}, map[string]string{"LA_WEIGHTS_QUANT": "q4"}, 2, `LA_WEIGHTS_QUANT is "q4"`},
		{[]string{"bench"}, map[string]string{"LA_ENGINE": "sim"}, 2, `bench times the cpu engine, and LA_ENGINE is "sim"`},
		// No --weights: the worker's choice, here a configured directory that is not a checkpoint.
		{[]string{"bench"}, map[string]string{"LA_WEIGHTS_DIR": "/nonexistent/ckpt"}, 1, "choosing the weights: LA_WEIGHTS_DIR /nonexistent/ckpt"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			if code := realMain(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("%q %v: exit %d, stderr %q; want exit %d and %q", c.args, c.env, code, stderr.String(), c.code, c.want)
			}
		})
	}
}

// TestBenchDefaultsAreTheWorkers: the bench opens the engine with the worker's engine
// settings, and its flag defaults are theirs, LA_MAX_SEQ_LEN (the KV cache it opens the
// backend with) among them.
func TestBenchDefaultsAreTheWorkers(t *testing.T) {
	t.Setenv("LA_MAX_SEQ_LEN", "96")
	t.Setenv("LA_THREADS", "3")
	t.Setenv("LA_WEIGHTS_QUANT", "q8")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	d := benchDefaults(cfg)
	if d.Settings != cfg.Engine.Settings {
		t.Errorf("settings %+v, want the worker's %+v", d.Settings, cfg.Engine.Settings)
	}
	fs := bench.Flags(d)
	for flag, want := range map[string]string{"max-seq-len": "96", "threads": "3", "quant": "q8"} {
		if got := fs.Lookup(flag).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", flag, got, want)
		}
	}
}
