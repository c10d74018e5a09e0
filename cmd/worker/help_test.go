package main

import (
	"bytes"
	"flag"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/bench"
	"github.com/locateanything/detect/bench/loadtest"
	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/tripwire"
)

// TestEveryCommandHasHelp runs the worker and each of its subcommands with --help (and
// -h, `worker help NAME`, and --help after other arguments): each exits 0 at once, prints
// its usage, every flag it parses and (for the service) every LA_* variable with its
// default, and starts nothing: no NATS connection to LA_NATS_URL (a listener of the
// test's), no listener on LA_HTTP_ADDR or LA_METRICS_ADDR, no data directory.
func TestEveryCommandHasHelp(t *testing.T) {
	nats := tripwire.New(t)
	httpAddr, metricsAddr := freeport.MustAddr(t), freeport.MustAddr(t)
	dataDir := filepath.Join(t.TempDir(), "la-data")
	t.Setenv("LA_NATS_URL", "nats://"+nats.Addr())
	t.Setenv("LA_HTTP_ADDR", httpAddr)
	t.Setenv("LA_METRICS_ADDR", metricsAddr)
	t.Setenv("LA_DATA_DIR", dataDir)
	t.Setenv("LA_ENGINE", "sim") // were anything to start, it would start fast

	var (
		tok  tokenizeOptions
		det  detectOptions
		smk  smokeOptions
		prep preprocessOptions
	)
	cases := []struct {
		args  []string
		flags *flag.FlagSet // the set the command parses; nil for none
		vars  []string      // variables the help must list
	}{
		{[]string{"--help"}, nil, config.Names(config.Worker{})},
		{[]string{"-h"}, nil, config.Names(config.Worker{})},
		{[]string{"help"}, nil, config.Names(config.Worker{})},
		{[]string{"run", "--help"}, nil, config.Names(config.Worker{})},
		{[]string{"help", "run"}, nil, config.Names(config.Worker{})},
		{[]string{"config", "--help"}, nil, nil},
		{[]string{"tokenize", "--help"}, tokenizeFlags(&tok), config.Names(config.Weights{})},
		{[]string{"tokenize", "some", "text", "-h"}, tokenizeFlags(&tok), nil},
		{[]string{"detect", "--help"}, detectFlags(&det, config.Worker{}), append(config.Names(config.Weights{}), config.Names(config.Engine{})...)},
		{[]string{"detect", "--image", "x.jpg", "--help"}, detectFlags(&det, config.Worker{}), nil},
		{[]string{"bench", "--help"}, bench.Flags(bench.Defaults{}), []string{"LA_WEIGHTS_DIR", "LA_WEIGHTS_QUANT", "LA_THREADS", "LA_MAX_SEQ_LEN"}},
		{[]string{"smoke", "--help"}, smokeFlags(&smk, config.HTTP{}), []string{"LA_HTTP_ADDR", "LA_HTTP_TOKEN"}},
		{[]string{"smoke", "-h"}, smokeFlags(&smk, config.HTTP{}), nil},
		{[]string{"preprocess", "--help"}, preprocessFlags(&prep, config.Worker{}), []string{"LA_IN_TOKEN_LIMIT", "LA_CANON_GRID", "LA_CANON_ASPECT"}},
		{[]string{"loadtest", "--help"}, loadtest.Flags(config.Worker{}), []string{"LA_CHIPS", "LA_MAX_BATCH", "LA_SIM_DECODE"}},
		{[]string{"help", "loadtest"}, loadtest.Flags(config.Worker{}), nil},
	}
	for _, c := range cases {
		code, stdout, stderr := runWithin(t, 20*time.Second, c.args)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: worker") {
			t.Errorf("worker %q: exit %d, stderr %q, stdout %.80q; want exit 0 and the usage", c.args, code, stderr, stdout)
			continue
		}
		if c.flags != nil {
			c.flags.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(stdout, "\n  --"+f.Name+" ") {
					t.Errorf("worker %q: the help does not list --%s:\n%s", c.args, f.Name, stdout)
				}
			})
		}
		for _, v := range c.vars {
			if !strings.Contains(stdout, "\n  "+v+" ") {
				t.Errorf("worker %q: the help does not list %s", c.args, v)
			}
		}
	}
	for _, want := range [][2]string{
		{"tokenize", "(env LA_WEIGHTS_DIR; default none)"},
		{"detect", "(env LA_MAX_NEW_TOKENS; default 128)"},
		{"bench", "(env LA_WEIGHTS_QUANT; default bf16)"},
		{"bench", "(env LA_MAX_SEQ_LEN; default 4096)"},
		{"loadtest", "(env LA_CHIPS; default 1)"},
		{"preprocess", "(env LA_CANON_ASPECT; default 1920x1080)"},
		{"loadtest", "(env LA_MAX_BATCH; default 1,8)"},
		{"run", "LA_GRACE after SIGTERM, time the jobs in flight get to finish before they are given back (default 30s)"},
		{"run", "LA_NATS_URL comma-separated NATS server URLs; empty = the worker's embedded server [set: \"nats://"},
	} {
		_, stdout, _ := runWithin(t, 20*time.Second, []string{want[0], "--help"})
		if !strings.Contains(stdout, want[1]) && !strings.Contains(strings.Join(strings.Fields(stdout), " "), want[1]) {
			t.Errorf("worker %s --help lacks %q", want[0], want[1])
		}
	}
	nats.NoConnection(t, "the NATS address")
	for _, addr := range []string{httpAddr, metricsAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is taken after --help: %v", addr, err)
			continue
		}
		ln.Close()
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("--help created the data directory %s: %v", dataDir, err)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		code, stdout, _ := runWithin(t, 10*time.Second, args)
		if code != 0 || !strings.HasPrefix(stdout, "worker ") || !strings.Contains(stdout, "(commit ") ||
			!strings.Contains(stdout, runtime.Version()) {
			t.Errorf("worker %q: exit %d, %q", args, code, stdout)
		}
	}
}

// runWithin runs realMain and fails the test if it has not returned within d (the
// service, started by mistake, would not).
func runWithin(t *testing.T, d time.Duration, args []string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- realMain(args, &out, &errOut) }()
	select {
	case code = <-done:
		return code, out.String(), errOut.String()
	case <-time.After(d):
		t.Fatalf("worker %q did not return within %s: it started something", args, d)
		return 0, "", ""
	}
}
