package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/freeport"
)

func TestWorkerRefusesToStartWithoutEngine(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("LA_WEIGHTS_DIR", filepath.Join(t.TempDir(), "typo")) // configured, but not there
	t.Setenv("LA_NATS_LISTEN", freeport.MustAddr(t))
	t.Setenv("LA_METRICS_ADDR", "off")
	t.Setenv("LA_HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("LA_LOG_FORMAT", "json")
	var stdout, stderr bytes.Buffer
	code := realMain(nil, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "LA_WEIGHTS_DIR") {
		t.Errorf("exit %d, stderr %q; want 1 and a message naming LA_WEIGHTS_DIR", code, stderr.String())
	}
	if got := strings.Count(stdout.String(), "Application startup failed"); got != 1 || strings.Contains(stdout.String(), "startup complete") {
		t.Errorf("stdout %q: want the launcher's failure landmark exactly once and no ready line", stdout.String())
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	for _, c := range []struct{ key, value, want string }{
		{"LA_CHIPS", "0", "LA_CHIPS"},
		{"LA_LOG_FORMAT", "xml", "LA_LOG_FORMAT"},
		{"LA_LOG_LEVEL", "loud", "LA_LOG_LEVEL"},
		{"LA_MAX_BATCH", "33", "LA_MAX_BATCH"},
		{"LA_WEIGHTS_QUANT", "q4", "LA_WEIGHTS_QUANT"},
		{"LA_MAX_NEW_TOKENS", "2000", "LA_MAX_NEW_TOKENS"},
		{"LA_WORKER_NAME", "a.b", "LA_WORKER_NAME"},
		{"LA_ACK_WAIT", "soon", "LA_ACK_WAIT"},
		{"LA_MAX_DELIVER", "2", "LA_BACKOFF"},
		{"LA_MAX_DELIVER", "1", "LA_BACKOFF"}, // JetStream refuses a back-off longer than the deliveries
		{"LA_ENGINE", "gpu", "LA_ENGINE"},
		// Zero or negative durations where they make no sense are errors, not defaults.
		{"LA_GRACE", "0s", "LA_GRACE"},
		{"LA_POLL_WAIT", "0s", "LA_POLL_WAIT"},
		{"LA_HTTP_READ_TIMEOUT", "-1s", "LA_HTTP_READ_TIMEOUT"},
		{"LA_RETRY_DELAY", "0s", "LA_RETRY_DELAY"},
		{"LA_HTTP_MAX_PENDING", "0", "LA_HTTP_MAX_PENDING"},
		{"LA_PREC", "fast", "LA_PREC"},
		{"LA_GENERATION_MODE", "fast", "LA_GENERATION_MODE"}, // the reference's fast mode is not served
		{"LA_GENERATION_MODE", "Hybrid", "LA_GENERATION_MODE"},
	} {
		t.Run(c.key, func(t *testing.T) {
			t.Setenv("LA_DATA_DIR", t.TempDir())
			t.Setenv(c.key, c.value)
			_, err := loadConfig()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s=%s: error %v; want one naming %s", c.key, c.value, err, c.want)
			}
		})
	}
}

func TestUnknownVariableFailsWithASuggestion(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("LA_METRICS_ADRR", ":1")
	_, err := loadConfig()
	if err == nil || !strings.Contains(err.Error(), "LA_METRICS_ADRR: unknown; did you mean LA_METRICS_ADDR?") {
		t.Fatalf("error %v; want the misspelt variable named with a suggestion", err)
	}
	var stdout, stderr bytes.Buffer
	if code := realMain(nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "LA_METRICS_ADDR?") {
		t.Fatalf("worker with a misspelt variable: exit %d, stderr %q; want exit 2 with the suggestion", code, stderr.String())
	}
	// The submit CLI's and other tools' variables share the shell and are accepted.
	t.Setenv("LA_METRICS_ADRR", "")
	t.Setenv("LA_SUBMIT_UPLOAD", "s3://up/")
	t.Setenv("LA_DEMO_SEED", "3")
	if err := unsetThenLoad(t, "LA_METRICS_ADRR"); err != nil {
		t.Fatalf("submit's and the demo's variables refused: %v", err)
	}
}

// unsetThenLoad removes name from the environment for the rest of the test and loads.
func unsetThenLoad(t *testing.T, name string) error {
	t.Helper()
	unsetenv(t, name)
	_, err := loadConfig()
	return err
}

func TestConfigSingleMachineDefaults(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LA_DATA_DIR", dir)
	wd := t.TempDir()
	t.Chdir(wd)
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.URL != "" || cfg.Embedded.Listen != "127.0.0.1:4222" || cfg.Engine.Backend != "cpu" || cfg.MaxSeqLen != 4096 ||
		cfg.MaxNewTokens != 128 || cfg.MaxNewTokensCap != 1024 || cfg.HTTP.Addr != ":20000" || cfg.Prefetch != 0 || cfg.MaxBatch != 8 {
		t.Errorf("defaults: %+v", cfg)
	}
	if want := "file://" + filepath.Join(dir, "results") + "/"; cfg.ResultsURL != want {
		t.Errorf("results %q, want %q", cfg.ResultsURL, want)
	}
	// Embedded NATS on loopback: jobs may read below the working directory and the data
	// directory, never anywhere on the machine.
	results := filepath.Join(dir, "results")
	if want := []string{wd, results}; strings.Join(cfg.FileRoots, ",") != strings.Join(want, ",") {
		t.Errorf("file roots %v, want %v", cfg.FileRoots, want)
	}
	if want := []string{results}; strings.Join(cfg.OutputRoots, ",") != strings.Join(want, ",") {
		t.Errorf("output roots %v, want %v: a job writes below the results directory only, never the JetStream store", cfg.OutputRoots, want)
	}
}

// TestConfigResultsURLAndRoots: an explicit file:// LA_RESULTS_URL with no roots becomes the
// place jobs write; one outside configured roots is refused at start-up (it would fail
// every job), and a working directory of / is not taken as a read root.
func TestConfigResultsURLAndRoots(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	out := t.TempDir()
	t.Setenv("LA_RESULTS_URL", "file://"+out+"/")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.OutputRoots, ",") != out || !slices.Contains(cfg.FileRoots, out) {
		t.Errorf("LA_RESULTS_URL=%s: roots read %v write %v; want it writable", out, cfg.FileRoots, cfg.OutputRoots)
	}
	t.Setenv("LA_FILE_ROOTS", t.TempDir())
	if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), "LA_RESULTS_URL") {
		t.Errorf("results outside LA_FILE_ROOTS: %v; want a start-up error naming LA_RESULTS_URL", err)
	}
	t.Setenv("LA_FILE_ROOTS", "")
	t.Setenv("LA_RESULTS_URL", "")
	t.Chdir("/")
	if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), "LA_FILE_ROOTS") {
		t.Errorf("working directory /: %v; want an error asking for LA_FILE_ROOTS", err)
	}
}

func TestConfigReadsNATSAndStorageVariables(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("LA_NATS_URL", "nats://n1:4222,nats://n2:4222")
	t.Setenv("LA_NATS_TIMEOUT", "3s")
	t.Setenv("LA_S3_ENDPOINT", "minio:9000")
	t.Setenv("LA_RESULTS_URL", "s3://results/")
	t.Setenv("LA_BACKOFF", "")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.URL != "nats://n1:4222,nats://n2:4222" || cfg.NATS.Timeout != 3*time.Second {
		t.Errorf("NATS config %+v", cfg.NATS)
	}
	if cfg.Storage.Endpoint != "minio:9000" || cfg.ResultsURL != "s3://results/" || len(cfg.FileRoots) != 0 {
		t.Errorf("storage: endpoint %q results %q roots %v", cfg.Storage.Endpoint, cfg.ResultsURL, cfg.FileRoots)
	}
	if len(cfg.BackOff) != 0 {
		t.Errorf("LA_BACKOFF= gave %v; want no back-off", cfg.BackOff)
	}
}

// TestConfigIgnoresUnprefixedNames: only LA_* variables configure the worker. envconfig
// falls back to a field's bare tag, and reads SECTION_TAG for a named struct field, so the
// tags carry the full names and the sections are embedded; an ENGINE, HTTP_ADDR or
// ENGINE_LA_ENGINE that some other tool set must change nothing.
func TestConfigIgnoresUnprefixedNames(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("ENGINE", "ttnn")
	t.Setenv("HTTP_ADDR", ":1")
	t.Setenv("PREFETCH", "9")
	t.Setenv("HTTP_MAX_PENDING", "1")
	t.Setenv("ENGINE_LA_ENGINE", "ttnn")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engine.Backend != "cpu" || cfg.HTTP.Addr != ":20000" || cfg.Prefetch != 0 || cfg.HTTP.MaxPending == 1 {
		t.Fatalf("unprefixed variables were read: engine %q http %q prefetch %d max pending %d",
			cfg.Engine.Backend, cfg.HTTP.Addr, cfg.Prefetch, cfg.HTTP.MaxPending)
	}
	t.Setenv("LA_ENGINE", "ttnn")
	if cfg, err = loadConfig(); err != nil || cfg.Engine.Backend != "ttnn" {
		t.Fatalf("LA_ENGINE=ttnn gave engine %q (%v)", cfg.Engine.Backend, err)
	}
}

func TestConfigCommandPrintsSourcesAndRedactsSecrets(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("LA_GRACE", "45s")
	t.Setenv("LA_NATS_USER", "worker")
	t.Setenv("LA_NATS_PASSWORD", "hunter2-nats")
	t.Setenv("LA_S3_SECRET_KEY", "s3-very-secret")
	t.Setenv("LA_S3_ACCESS_KEY", "AKIA-ACCESS")
	t.Setenv("HF_TOKEN", "hf_tokensecret")
	t.Setenv("LA_NATS_URL", "nats://alice:url-secret@127.0.0.1:4222,nats://tok-secret@127.0.0.1:4223")
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"config"}, &stdout, &stderr); code != 0 {
		t.Fatalf("worker config: exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	for _, secret := range []string{"hunter2-nats", "s3-very-secret", "AKIA-ACCESS", "hf_tokensecret", "url-secret", "tok-secret"} {
		if strings.Contains(out, secret) {
			t.Errorf("worker config printed the secret %q", secret)
		}
	}
	for _, want := range []string{"LA_GRACE  ", "45s", "environment", "LA_PREFETCH", "default", "[redacted]"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker config output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 2 && f[0] == "LA_GRACE" && (f[1] != "45s" || f[2] != "environment"):
			t.Errorf("LA_GRACE line %q, want 45s from the environment", line)
		case len(f) > 0 && f[0] == "LA_PREFETCH" && !strings.Contains(strings.Join(f, " "), "10 (LA_MAX_BATCH + 2) derived"):
			t.Errorf("LA_PREFETCH line %q, want the value in effect, 10 (LA_MAX_BATCH + 2), derived", line)
		}
	}
	t.Setenv("LA_PREFETCH", "-1")
	if code := realMain([]string{"config"}, &stdout, &stderr); code != 2 {
		t.Errorf("worker config with a bad value: exit %d, want 2", code)
	}
}

// unsetenv removes name for the rest of the test (t.Setenv first, so it is restored).
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// TestLogLevelInAnyCase: LA_LOG_LEVEL=DEBUG (as many deployments write it) is the debug
// level, not a refusal.
func TestLogLevelInAnyCase(t *testing.T) {
	for _, v := range []string{"DEBUG", "Debug", "debug"} {
		t.Setenv("LA_DATA_DIR", t.TempDir())
		t.Setenv("LA_LOG_LEVEL", v)
		c, err := loadConfig()
		if err != nil {
			t.Fatalf("LA_LOG_LEVEL=%s: %v", v, err)
		}
		if c.Observe.LogLevel != config.LogDebug {
			t.Errorf("LA_LOG_LEVEL=%s: level %q, want %q", v, c.Observe.LogLevel, config.LogDebug)
		}
	}
}
