package submit

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := Main(context.Background(), args, IO{Stdout: &stdout, Stderr: &stderr})
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
		{[]string{"--out", t.TempDir(), "--upload", "/tmp/x", "frames/"}, "must be an s3:// prefix"},
		{[]string{"status"}, "give one job ID or --batch B"},
		{[]string{"status", "a", "b"}, "give one job ID or --batch B"},
		{[]string{"cancel", "--batch", "b", "id"}, "give one job ID or --batch B"},
		{[]string{"dlq"}, "want list, show ID or replay ID|--all"},
		{[]string{"dlq", "show"}, "want list, show ID or replay ID|--all"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
	}
	for _, c := range cases {
		code, _, stderr := runMain(t, c.args...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("submit %q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, ExitUsage, c.want)
		}
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

func TestMainHelp(t *testing.T) {
	code, stdout, _ := runMain(t, "help")
	if code != ExitOK || !strings.Contains(stdout, "submit dlq replay ID | --all") {
		t.Fatalf("exit %d, %q", code, stdout)
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
		cfg, err := LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		if c.url == "" && cfg.NATS.URL != DefaultNATSURL {
			t.Errorf("default NATS URL %q, want %q", cfg.NATS.URL, DefaultNATSURL)
		}
		if fmt.Sprint(cfg.Storage.FileRoots) != fmt.Sprint(c.wantRoots) {
			t.Errorf("LA_NATS_URL=%q LA_FILE_ROOTS=%q: roots %v, want %v", c.url, c.roots, cfg.Storage.FileRoots, c.wantRoots)
		}
	}
}
