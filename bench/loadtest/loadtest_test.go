package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	_ "image/jpeg"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/cli"
)

// baseConfig is the worker's defaults with the bundled model named, as `worker loadtest`
// would load them from an empty environment in the repository root.
func baseConfig(t *testing.T) config.Worker {
	t.Helper()
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs("../../models/tiny-shapes")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Weights.Dir = dir
	cfg.Sim.Speed = 50 // a 55-token answer in about 30 ms
	return cfg
}

// TestLoadtestReportsEveryScenario runs the command on the real worker, NATS and storage
// with a fast simulated chip: the serial baseline and each batch size run, every job
// succeeds, and the last line is the JSON report with the figures the throughput doc
// quotes. (Overlays are left off to keep it quick under the race detector; the worker's
// own test of the simulated chip asks for them.)
func TestLoadtestReportsEveryScenario(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), []string{"--jobs", "4", "--chips", "1", "--batch", "1,2"},
		baseConfig(t), Env{Stdout: &out, WorkDir: "../.."})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	var fields map[string]any
	if err := json.Unmarshal([]byte(last), &fields); err != nil {
		t.Fatalf("last line is not JSON: %q", last)
	}
	for _, k := range []string{"jobs_per_s", "device_busy", "p50_ms", "p95_ms", "host_cpu_ms_per_job", "serial_baseline_jobs_per_s"} {
		if v, ok := fields[k].(float64); !ok || v <= 0 {
			t.Errorf("report field %s = %v, want a positive number", k, fields[k])
		}
	}
	var rep Report
	if err := json.Unmarshal([]byte(last), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 3 || rep.Scenario != "batch2" || rep.Query != "person</c>car</c>bicycle" || rep.Overlay {
		t.Fatalf("report %+v: want serial, batch1 and batch2, the headline batch2", rep)
	}
	for i, want := range []string{"serial", "batch1", "batch2"} {
		o := rep.Scenarios[i]
		if o.Scenario != want || o.Jobs != 4 || o.Failed != 0 || o.TokensPerJob < 5 || o.DeviceBusy <= 0 || o.DeviceBusy > 1.05 {
			t.Errorf("scenario %d: %+v", i, o)
		}
	}
	// batch2's Runner holds all four jobs: no backlog, so its figures are the whole run's.
	if s := rep.Scenarios[2]; s.BacklogS != s.WallS || s.DeviceBusy != s.DeviceBusyOverall {
		t.Errorf("batch2 without a backlog: backlog %vs of %vs, busy %v and %v overall; want the whole run's", s.BacklogS, s.WallS, s.DeviceBusy, s.DeviceBusyOverall)
	}
	if rep.Scenarios[0].Prefetch != 1 || rep.Scenarios[1].Prefetch != 3 || rep.Scenarios[2].Prefetch != 4 {
		t.Errorf("prefetch %d, %d, %d: want 1 for the serial baseline and the worker's default (batch + 2) otherwise",
			rep.Scenarios[0].Prefetch, rep.Scenarios[1].Prefetch, rep.Scenarios[2].Prefetch)
	}
	if !strings.Contains(out.String(), "3 generated") {
		t.Errorf("the report does not say the 1080p frames were generated from the photographs:\n%s", out.String())
	}
}

// TestLoadtestPollsTheConsole: with --console every scenario runs with the web console
// served and a browser polling it (the gallery's thumbnails included); the
// requests are counted in the report and none fails.
func TestLoadtestPollsTheConsole(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), []string{"--jobs", "6", "--chips", "1", "--batch", "2", "--console", "--console-every", "200ms"},
		baseConfig(t), Env{Stdout: &out, WorkDir: "../.."})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var rep Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Console || len(rep.Scenarios) != 2 {
		t.Fatalf("report %+v: want two scenarios with the console", rep)
	}
	for _, o := range rep.Scenarios {
		// at least the first round: overview, batches and the gallery page
		if o.Failed != 0 || o.ConsoleRequests < 3 || o.ConsoleFailed != 0 {
			t.Errorf("scenario %s: %d jobs failed, %d console requests, %d failed; want none failed and requests made",
				o.Scenario, o.Failed, o.ConsoleRequests, o.ConsoleFailed)
		}
	}
}

// TestFramesAre1080pJPEGs: photographs of other sizes become 1920x1080 JPEGs; a 1080p JPEG
// is used as it is.
func TestFramesAre1080pJPEGs(t *testing.T) {
	f, err := prepareFrames("../../testdata/images", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.paths) != 3 || f.generated != 3 {
		t.Fatalf("%d frames, %d generated; want the three photographs, all generated", len(f.paths), f.generated)
	}
	again := t.TempDir()
	data, err := os.ReadFile(f.paths[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil || format != "jpeg" || cfg.Width != 1920 || cfg.Height != 1080 {
		t.Fatalf("frame: %s %dx%d (%v), want a 1920x1080 JPEG", format, cfg.Width, cfg.Height, err)
	}
	if err := os.WriteFile(filepath.Join(again, "frame.jpg"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := prepareFrames(again, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := os.ReadFile(g.paths[0])
	if g.generated != 0 || !bytes.Equal(kept, data) {
		t.Errorf("a 1080p JPEG was re-encoded (generated %d)", g.generated)
	}
}

func TestBadCommandLinesAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--chips", "0"}, {"--batch", "1,99"}, {"--console-every", "0s"}, {"--overlay-format", "gif"}, {"--jobs", "0"}, {"extra"}, {"--images", "/nonexistent"}, {"--nope"},
	} {
		err := Run(context.Background(), args, baseConfig(t), Env{Stdout: &bytes.Buffer{}, WorkDir: "../.."})
		if !cli.IsUsage(err) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}
