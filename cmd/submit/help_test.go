package main

import (
	"context"
	"flag"
	"runtime"
	"strings"
	"testing"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/tripwire"
)

// TestEveryCommandHasHelp runs every command and subcommand with --help (and -h, and
// `submit help COMMAND`, and --help after arguments): each exits 0, lists every flag the
// command parses and every variable submit reads, with its default, and starts nothing:
// the configuration is not even read, and the NATS address (a listener of the test's) gets
// no connection.
func TestEveryCommandHasHelp(t *testing.T) {
	nats := tripwire.New(t)
	t.Setenv("LA_NATS_URL", "nats://"+nats.Addr())
	t.Setenv("LA_NATS_TIMEOUT", "1s")
	var (
		run     runOptions
		status  statusOptions
		batches batchesOptions
		cancel  cancelOptions
		dlqList dlqListOptions
		j, all  bool
	)
	cases := []struct {
		args  []string
		flags *flag.FlagSet // the set the command parses
	}{
		{[]string{"--help"}, runFlags(&run)},
		{[]string{"-h"}, runFlags(&run)},
		{[]string{"help"}, runFlags(&run)},
		{[]string{"run", "--help"}, runFlags(&run)},
		{[]string{"frames/", "--out", "x", "--help"}, runFlags(&run)},
		{[]string{"run", "--dry-run", "frames/", "-h"}, runFlags(&run)},
		{[]string{"status", "--help"}, statusFlags(&status)},
		{[]string{"status", "0123abcd", "-h"}, statusFlags(&status)},
		{[]string{"help", "status"}, statusFlags(&status)},
		{[]string{"batches", "--help"}, batchesFlags(&batches)},
		{[]string{"cancel", "--batch", "b", "--help"}, cancelFlags(&cancel)},
		{[]string{"dlq", "--help"}, nil},
		{[]string{"dlq", "list", "--help"}, dlqListFlags(&dlqList)},
		{[]string{"help", "dlq", "list"}, dlqListFlags(&dlqList)},
		{[]string{"dlq", "show", "someid", "-h"}, dlqShowFlags(&j)},
		{[]string{"dlq", "replay", "--help"}, dlqReplayFlags(&all)},
	}
	variables := config.Names(config.Submit{})
	for _, c := range cases {
		loaded := false
		cio := IO{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}, LoadConfig: func() (config.Submit, error) {
			loaded = true
			return readConfig()
		}}
		code := Main(t.Context(), c.args, cio)
		out, errOut := cio.Stdout.(*strings.Builder).String(), cio.Stderr.(*strings.Builder).String()
		if code != ExitOK || errOut != "" || !strings.HasPrefix(out, "usage: submit") {
			t.Errorf("submit %q: exit %d, stderr %q, stdout %.80q; want exit 0 and the usage on stdout", c.args, code, errOut, out)
			continue
		}
		if loaded {
			t.Errorf("submit %q read the configuration: --help must start nothing", c.args)
		}
		if c.flags != nil {
			c.flags.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(out, "\n  --"+f.Name+" ") && !strings.Contains(out, "\n  --"+f.Name+"\n") {
					t.Errorf("submit %q: the help does not list --%s:\n%s", c.args, f.Name, out)
				}
			})
		}
		for _, v := range variables {
			if !strings.Contains(out, "\n  "+v+" ") {
				t.Errorf("submit %q: the help does not list %s", c.args, v)
			}
		}
		wants := []string{"-h, --help", "(default nats://127.0.0.1:4222)", "LA_NATS_TIMEOUT connect timeout (default 10s)"}
		if c.flags != nil && c.flags.Lookup("upload") != nil {
			wants = append(wants, "(env LA_SUBMIT_UPLOAD; default none)")
		}
		flat := strings.Join(strings.Fields(out), " ") // a variable's meaning wraps
		for _, want := range wants {
			if !strings.Contains(out, want) && !strings.Contains(flat, want) {
				t.Errorf("submit %q: the help lacks %q:\n%s", c.args, want, out)
			}
		}
	}
	nats.NoConnection(t, "the NATS address")
}

// The environment shown in --help is the process's, secrets redacted.
func TestHelpShowsTheSetVariables(t *testing.T) {
	var out strings.Builder
	code := Main(t.Context(), []string{"status", "--help"}, IO{Stdout: &out, Stderr: &out,
		Environ: []string{"LA_NATS_URL=nats://submit:s3cr3t-Value@q:4222", "LA_S3_SECRET_KEY=s3cr3t-Value"}})
	if code != ExitOK || !strings.Contains(out.String(), `@q:4222"]`) || !strings.Contains(strings.Join(strings.Fields(out.String()), " "), `LA_S3_SECRET_KEY S3 secret key [set: "[redacted]"]`) {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
	if strings.Contains(out.String(), "s3cr3t-Value") {
		t.Error("the help prints a secret")
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out strings.Builder
		code := Main(context.Background(), args, IO{Stdout: &out, Stderr: &out})
		if code != ExitOK || !strings.HasPrefix(out.String(), "submit ") || !strings.Contains(out.String(), runtime.Version()) ||
			!strings.Contains(out.String(), "commit ") {
			t.Errorf("submit %q: exit %d, %q", args, code, out.String())
		}
	}
}
