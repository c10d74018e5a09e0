package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/submit"
)

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := Main(context.Background(), args, IO{Stdout: &stdout, Stderr: &stderr, LoadConfig: readConfig})
	return code, stdout.String(), stderr.String()
}

// Mistakes on the command line are exit 2 with a message that says what is wrong, before
// anything is contacted.
func TestMainUsageErrors(t *testing.T) {
	t.Setenv("LA_NATS_URL", "nats://127.0.0.1:1") // nothing listens: these must fail earlier
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--out", t.TempDir()}, "no inputs"},
		{[]string{"frames/"}, "--out is required"},
		{[]string{"--out", t.TempDir(), "--task", "segment", "frames/"}, `--task "segment" is not one of detect, ground`},
		{[]string{"--out", t.TempDir(), "--max-new-tokens", "-1", "frames/"}, "--max-new-tokens -1 is negative"},
		{[]string{"--out", t.TempDir(), "--generation-mode", "fast", "frames/"}, `--generation-mode "fast" is not one of ar, hybrid`},
		{[]string{"--out", t.TempDir(), "--upload", "/tmp/x", "frames/"}, "must be an s3:// prefix"},
		{[]string{"--out", t.TempDir(), "--class", "no spaces", "frames/"}, `--class "no spaces" must be`},
		{[]string{"--out", t.TempDir(), "--batch", "a/b", "frames/"}, `--batch "a/b" must be`},
		{[]string{"--out", t.TempDir(), "--overlay", "--overlay-format", "webp", "frames/"}, `--overlay-format "webp" is not one of png, jpeg`},
		{[]string{"--out", t.TempDir(), "--overlay-format", "jpeg", "frames/"}, "--overlay-format jpeg needs --overlay"},
		{[]string{"status", "a", "b"}, "give one SOURCE, job ID or ID prefix, or none"},
		{[]string{"status", "--limit", "x"}, `invalid value "x" for flag -limit`},
		{[]string{"batches", "extra"}, "batches takes no arguments"},
		{[]string{"cancel", "--batch", "b", "id"}, "give one job ID or --batch B"},
		{[]string{"dlq"}, "want list, show ID or replay ID|--all"},
		{[]string{"dlq", "show"}, "want list, show ID or replay ID|--all"},
		{[]string{"dlq", "replay", "--all", "id"}, "want list, show ID or replay ID|--all"},
		{[]string{"dlq", "list", "--batch", "a b"}, `--batch "a b" must be`},
		{[]string{"--out", t.TempDir(), "--json", "frames/"}, "--json goes with --dry-run"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
	}
	for _, c := range cases {
		code, _, stderr := runMain(t, c.args...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("submit %q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, ExitUsage, c.want)
		}
	}
}

// TestMainMissingInputBeforeNATS: inputs that do not exist are reported as such (exit 2),
// not hidden behind a NATS server that is not up yet.
func TestMainMissingInputBeforeNATS(t *testing.T) {
	t.Setenv("LA_NATS_URL", "nats://127.0.0.1:1") // nothing listens
	t.Setenv("LA_NATS_TIMEOUT", "2s")
	missing := t.TempDir() + "/no-such-dir"
	code, _, stderr := runMain(t, "--out", t.TempDir(), missing)
	if code != ExitUsage || !strings.Contains(stderr, "no-such-dir") || strings.Contains(stderr, "connect to NATS") {
		t.Fatalf("exit %d, stderr %q; want exit %d naming the missing input, not NATS", code, stderr, ExitUsage)
	}
}

// TestMainNoQueryBeforeNATS: images without a query (an empty --query) are refused as
// such (exit 2) before NATS is asked, and nothing is created.
func TestMainNoQueryBeforeNATS(t *testing.T) {
	t.Setenv("LA_NATS_URL", "nats://127.0.0.1:1") // nothing listens
	t.Setenv("LA_NATS_TIMEOUT", "2s")
	dir := t.TempDir()
	writeImages(t, dir, 2)
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runMain(t, "--out", out, "--query", "", dir)
	if code != ExitUsage || !strings.Contains(stderr, "no query for") || strings.Contains(stderr, "connect to NATS") || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d naming the image without a query, not NATS", code, stdout, stderr, ExitUsage)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the output directory exists after the refusal (%v)", err)
	}
}

func TestMainUnreachableNATSIsExit3(t *testing.T) {
	t.Setenv("LA_NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("LA_NATS_TIMEOUT", "2s")
	code, _, stderr := runMain(t, "status", "someid")
	if code != ExitUnavailable || !strings.Contains(stderr, "connect to NATS at nats://127.0.0.1:1") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestMainBadEnvironmentIsExit2(t *testing.T) {
	t.Setenv("LA_NATS_TIMEOUT", "soon")
	code, _, stderr := runMain(t, "status", "someid")
	if code != ExitUsage || !strings.Contains(stderr, "LA_NATS_TIMEOUT") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestLoadConfigSingleMachineDefault(t *testing.T) {
	for _, c := range []struct {
		url, roots string
		wantRoots  []string
	}{
		{"", "", []string{"/"}}, // the embedded worker on this machine: results are local files
		{"nats://127.0.0.1:4222,nats://localhost:4223", "", []string{"/"}},
		{"nats://nats-1:4222", "", nil}, // a remote cluster: no local files unless configured
		{"nats://127.0.0.1:4222,nats://nats-1:4222", "", nil},
		{"", "/data", []string{"/data"}},
	} {
		t.Setenv("LA_NATS_URL", c.url)
		t.Setenv("LA_FILE_ROOTS", c.roots)
		cfg, err := readConfig()
		if err != nil {
			t.Fatal(err)
		}
		if c.url == "" && cfg.NATS.URL != config.SubmitNATSURL {
			t.Errorf("default NATS URL %q, want %q", cfg.NATS.URL, config.SubmitNATSURL)
		}
		if fmt.Sprint(cfg.Storage.FileRoots) != fmt.Sprint(c.wantRoots) {
			t.Errorf("LA_NATS_URL=%q LA_FILE_ROOTS=%q: roots %v, want %v", c.url, c.roots, cfg.Storage.FileRoots, c.wantRoots)
		}
	}
}

// TestFailExitCodes: an interrupt wins over the ArgumentError it may arrive wrapped in (Ctrl-C
// while inputs are listed), a bad value is exit 2, anything else exit 3.
func TestFailExitCodes(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{&submit.ArgumentError{Err: fmt.Errorf("list s3://b/: %w", context.Canceled)}, ExitInterrupted},
		{fmt.Errorf("publish: %w", submit.ErrInterrupted), ExitInterrupted},
		{&submit.ArgumentError{Err: fmt.Errorf("class %q must be 1-128 characters", "a b")}, ExitUsage},
		{fmt.Errorf("status: %w", submit.ErrUnknownJob), ExitUsage},
		{fmt.Errorf("connect to NATS: refused"), ExitUnavailable},
	}
	for _, c := range cases {
		var stderr strings.Builder
		if got := fail(IO{Stdout: &strings.Builder{}, Stderr: &stderr}, c.err); got != c.want {
			t.Errorf("fail(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
