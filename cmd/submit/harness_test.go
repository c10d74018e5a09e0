package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
	"github.com/locateanything/detect/submit"
)

// childArgsEnv carries the arguments of a CLI run in a child process: the test binary
// re-executes itself as `submit`, so a test can kill a real run at an arbitrary point.
const childArgsEnv = "SUBMIT_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if raw := os.Getenv(childArgsEnv); raw != "" {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			fmt.Fprintln(os.Stderr, "bad child arguments:", err)
			os.Exit(99)
		}
		os.Exit(Main(context.Background(), args, IO{Stdout: os.Stdout, Stderr: os.Stderr, LoadConfig: readConfig}))
	}
	os.Exit(m.Run())
}

// gatedEngine is the engine double the real jobs.Runner drives, with a gate: the first
// allowed Generate calls run, later ones wait until open is called (or their job's ctx
// ends).
func gatedEngine(allowed int) (eng *enginetest.Engine, open func()) {
	release := make(chan struct{})
	eng = enginetest.New()
	eng.Release, eng.Allowed = release, allowed
	return eng, func() { close(release) }
}

// answered returns how many distinct images the engine answered, and the most answers any
// one image got.
func answered(eng *enginetest.Engine) (images, most int) {
	a := eng.Answers()
	for _, n := range a {
		most = max(most, n)
	}
	return len(a), most
}

// system is a whole deployment in one test: embedded NATS with the topology, versitygw
// with an "images" and a "results" bucket, and a real jobs.Runner on a chip whose engine
// is the test double.
type system struct {
	nats     *natsembed.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	topo     *jobs.Topology
	s3       *s3test.Server
	storeCfg storage.Config
	store    *storage.Router
	output   string // the worker's default output prefix
	eng      *enginetest.Engine
	open     func() (engine.Engine, error) // the worker's engine; nil = eng
}

// modelEngine is systemOptions.engine for the model in weights on the C engine: one
// thread, the native grid, maxBatch sequences decoded together and a budget of maxNew
// tokens.
func modelEngine(weights string, maxBatch, maxNew int) func() (engine.Engine, error) {
	return func() (engine.Engine, error) {
		return pipeline.Open(pipeline.OpenOptions{
			Settings:   engine.Settings{Backend: engine.BackendCPU, Threads: 1, MaxSeqLen: 512, MaxBatch: maxBatch, CanonGrid: "native", MaxNewTokens: maxNew, MaxNewTokensCap: maxNew},
			WeightsDir: weights,
		})
	}
}

// systemOptions vary a system; the zero value is the default topology and S3 output.
type systemOptions struct {
	topology jobs.TopologyConfig
	// fileRoot, when set, is a directory worker and CLI may use through file:// URLs (the
	// single-machine setup); results and overlays are then stored under it.
	fileRoot string
	// engine, when set, opens the worker's engine (a real pipeline) in place of the
	// double startSystem is given.
	engine func() (engine.Engine, error)
	// roles, when set, makes the NATS server authenticate by role: the CLI connects as a
	// producer (rolesProducer), the worker with the server's own worker login.
	roles bool
}

// The logins of a system with roles.
var (
	rolesProducer = [2]string{"producer", "pw-Producer-2"}
	rolesOperator = [2]string{"ops", "pw-Operator-2"}
)

func startSystem(t *testing.T, eng *enginetest.Engine, opts systemOptions) *system {
	t.Helper()
	s := &system{s3: s3test.Start(t), eng: eng, open: opts.engine, output: "s3://results/out/"}
	if opts.roles {
		srv, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(),
			User: rolesProducer[0], Password: rolesProducer[1], OperatorUser: rolesOperator[0], OperatorPassword: rolesOperator[1]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		s.nats = srv
		t.Setenv("LA_NATS_USER", rolesProducer[0])
		t.Setenv("LA_NATS_PASSWORD", rolesProducer[1])
	} else {
		s.nats = natstest.Start(t)
	}
	s.s3.CreateBucket(t, "images")
	s.s3.CreateBucket(t, "results")
	s.storeCfg = storage.Config{
		Endpoint: s.s3.URL(), Region: s3test.Region,
		AccessKey: s.s3.AccessKey, SecretKey: s.s3.SecretKey, PathStyle: "true", MaxImageBytes: 32 << 20,
	}
	if opts.fileRoot != "" {
		s.storeCfg.FileRoots = []string{opts.fileRoot}
		s.output = "file://" + filepath.Join(opts.fileRoot, "results") + "/"
		if err := os.MkdirAll(filepath.Join(opts.fileRoot, "results"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("LA_FILE_ROOTS", opts.fileRoot)
	}
	var err error
	if s.store, err = storage.Open(s.storeCfg); err != nil {
		t.Fatalf("open storage: %v", err)
	}
	t.Cleanup(func() { s.store.Close() })
	if opts.roles {
		user, password := s.nats.WorkerLogin()
		nc, err := nats.Connect(s.nats.ClientURL(), nats.UserInfo(user, password), nats.CustomInboxPrefix(natsembed.WorkerInboxPrefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		s.nc = nc
	} else {
		s.nc = natstest.Connect(t, s.nats)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatal(err)
	}
	if s.topo, err = jobs.EnsureTopology(t.Context(), s.js, workerTopology(t, opts.topology)); err != nil {
		t.Fatalf("topology: %v", err)
	}
	// The CLI reads the same variables as a worker.
	t.Setenv("LA_NATS_URL", s.nats.ClientURL())
	t.Setenv("LA_S3_ENDPOINT", s.storeCfg.Endpoint)
	t.Setenv("LA_S3_REGION", s.storeCfg.Region)
	t.Setenv("LA_S3_ACCESS_KEY", s.storeCfg.AccessKey)
	t.Setenv("LA_S3_SECRET_KEY", s.storeCfg.SecretKey)
	t.Setenv("LA_S3_PATH_STYLE", "true")
	s.startWorker(t)
	return s
}

// startWorker runs a jobs.Runner until the test ends.
func (s *system) startWorker(t *testing.T) {
	t.Helper()
	open := s.open
	if open == nil {
		open = func() (engine.Engine, error) { return s.eng, nil }
	}
	c, err := chip.Open(open)
	if err != nil {
		t.Fatal(err)
	}
	r, err := jobs.NewRunner(s.topo, s.store, c, jobs.RunnerConfig{
		Worker: "test-worker", DefaultOutput: s.output, Prefetch: 4,
		RunnerTiming: jobs.RunnerTiming{PollWait: 100 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
			RetryDelayMax: 500 * time.Millisecond, OpTimeout: 10 * time.Second, Grace: 5 * time.Second},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
		c.Close()
	})
}

// submit runs the CLI in this process and returns its exit code and output.
func (s *system) submit(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(t.Context(), args, IO{Stdout: &out, Stderr: &errOut, LoadConfig: readConfig})
	t.Logf("submit %s -> %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// countPublishes counts, from now on, every job message published on la.jobs.> by its
// Nats-Msg-Id, including those JetStream then drops as duplicates.
func (s *system) countPublishes(t *testing.T) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	sub, err := s.nc.Subscribe(jobs.JobSubjectPrefix+">", func(m *nats.Msg) {
		mu.Lock()
		counts[m.Header.Get(nats.MsgIdHdr)]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return func() map[string]int {
		s.nc.Flush()
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
}

// writeImages writes n distinct small PNGs into dir as 0000.png, 0001.png, ...
func writeImages(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		img := image.NewRGBA(image.Rect(0, 0, 8, 6))
		img.Set(0, 0, color.RGBA{R: uint8(i), G: uint8(i >> 8), B: 7, A: 255})
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%04d.png", i)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readResults reads results.jsonl in dir line by line (every row, repeats included).
func readResults(t *testing.T, dir string) []submit.Row {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, submit.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var rows []submit.Row
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r submit.Row
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("results.jsonl line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// countPublished counts the jobs the state file in dir records as published: whole lines
// only. submit writes the file through a buffer, so its last line may be cut where the
// buffer last filled, and a rerun drops such a line (the job is published again: JetStream's
// duplicate window keeps one copy). A test that waits for n records must wait for n lines.
func countPublished(dir string) int {
	data, _ := os.ReadFile(filepath.Join(dir, submit.StateFile))
	n := 0
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(`{"published":`)) && bytes.HasSuffix(line, []byte("\n")) {
			n++
		}
	}
	return n
}

// countLines counts the complete lines of a file (0 when it does not exist).
func countLines(path string) int {
	data, _ := os.ReadFile(path)
	return bytes.Count(data, []byte("\n"))
}

// workerTopology is the worker's default topology (package config) with the settings a
// test gives (its non-zero fields) in their place.
func workerTopology(t *testing.T, own jobs.TopologyConfig) jobs.TopologyConfig {
	t.Helper()
	var defaults config.Topology
	if err := envconfig.Process("", &defaults); err != nil {
		t.Fatal(err)
	}
	c := defaults
	if own.DuplicateWindow != 0 {
		c.DuplicateWindow = own.DuplicateWindow
	}
	if own.AckWait != 0 {
		c.AckWait = own.AckWait
	}
	if own.MaxDeliver != 0 {
		c.MaxDeliver = own.MaxDeliver
	}
	if own.BackOff != nil {
		c.BackOff = own.BackOff
	}
	return c
}

// must stops the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
