package cli

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/config"
)

func newFlags() (*flag.FlagSet, *string, *bool) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "output `DIR`")
	overlay := fs.Bool("overlay", false, "download overlays")
	return fs, out, overlay
}

func TestParseTakesFlagsAnywhere(t *testing.T) {
	cases := []struct {
		args    []string
		out     string
		overlay bool
		rest    []string
	}{
		{[]string{"--out", "o", "a", "b"}, "o", false, []string{"a", "b"}},
		{[]string{"a", "--out", "o", "b", "--overlay"}, "o", true, []string{"a", "b"}},
		{[]string{"a", "b", "--out=o"}, "o", false, []string{"a", "b"}},
		{[]string{"a", "--", "--out", "o"}, "", false, []string{"a", "--out", "o"}},
		{[]string{"--out", "--", "a", "--overlay"}, "--", true, []string{"a"}}, // "--" as a value
		{[]string{"-", "--overlay"}, "", true, []string{"-"}},
		{nil, "", false, nil},
	}
	for _, c := range cases {
		fs, out, overlay := newFlags()
		rest, err := Parse(fs, c.args)
		if err != nil || *out != c.out || *overlay != c.overlay || !slices.Equal(rest, c.rest) {
			t.Errorf("Parse(%q): out %q overlay %t rest %q err %v; want %q %t %q", c.args, *out, *overlay, rest, err, c.out, c.overlay, c.rest)
		}
	}
	for _, args := range [][]string{{"a", "--help"}, {"-h"}, {"a", "-help", "b"}} {
		fs, _, _ := newFlags()
		if _, err := Parse(fs, args); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("Parse(%q): %v, want flag.ErrHelp", args, err)
		}
		if !AsksHelp(args) {
			t.Errorf("AsksHelp(%q) = false", args)
		}
	}
	if AsksHelp([]string{"a", "--", "--help"}) {
		t.Error(`AsksHelp: "--help" after "--" is an argument`)
	}
	fs, _, _ := newFlags()
	if _, err := Parse(fs, []string{"a", "--nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown flag after an argument: %v", err)
	}
}

func TestHelpListsFlagsVariablesAndDefaults(t *testing.T) {
	fs, _, _ := newFlags()
	fs.String("upload", "", "upload local images under this `PREFIX`")
	fs.Int("concurrency", 4, "images at once")
	env := config.Settings(config.Submit{}, nil)
	h := Help{
		Usage:       []string{"t [flags] INPUT...", "t other"},
		Summary:     "Does things.",
		Flags:       fs,
		FlagEnv:     map[string]string{"upload": "LA_SUBMIT_UPLOAD"},
		Env:         env,
		Environ:     []string{"LA_NATS_USER=someone", "LA_NATS_PASSWORD=hunter2", "PATH=/bin"},
		EnvDefaults: map[string]string{"LA_NATS_URL": "nats://127.0.0.1:4222"},
	}
	var b strings.Builder
	if err := h.Write(&b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	flat := strings.Join(strings.Fields(got), " ") // a row's second column wraps
	for _, want := range []string{
		"usage: t [flags] INPUT...\n       t other\n",
		"--out DIR ", "--overlay ", "--concurrency int", "images at once (default 4)",
		"--upload PREFIX", "(env LA_SUBMIT_UPLOAD; default none)",
		"LA_NATS_URL ", "nats://127.0.0.1:4222", "LA_NATS_TIMEOUT", "10s", "LA_SUBMIT_UPLOAD",
		"LA_NATS_USER", `[set: "someone"]`, `[set: "[redacted]"]`, "-h, --help",
	} {
		if !strings.Contains(got, want) && !strings.Contains(flat, want) {
			t.Errorf("help lacks %q:\n%s", want, got)
		}
	}
	for _, s := range env {
		if !strings.Contains(got, s.Name) {
			t.Errorf("help lacks the variable %s", s.Name)
		}
	}
	if strings.Contains(got, "hunter2") {
		t.Errorf("help prints a secret:\n%s", got)
	}
	if strings.Contains(got, "(default false)") || strings.Contains(got, `(default )`) {
		t.Errorf("help prints zero defaults:\n%s", got)
	}
	for _, line := range strings.Split(got, "\n") {
		if len(line) > width {
			t.Errorf("line over %d characters: %q", width, line)
		}
	}
}
