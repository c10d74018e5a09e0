package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/jobs"
)

// blockingEngine is a test double: the query "block" runs until release is closed (or its
// ctx ends); every other query answers at once with one box over the whole image.
type blockingEngine struct {
	started chan string
	release chan struct{}

	mu    sync.Mutex
	calls []string
}

func newBlockingEngine() *blockingEngine {
	return &blockingEngine{started: make(chan string, 16), release: make(chan struct{})}
}

func (b *blockingEngine) Prepare(_ context.Context, req engine.Request) (*engine.Prepared, error) {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(req.Image))
	if err != nil {
		return nil, engine.InputErrorf(engine.CodeBadImage, "image cannot be decoded: %v", err)
	}
	return &engine.Prepared{Request: req, Width: cfg.Width, Height: cfg.Height}, nil
}

func (b *blockingEngine) Generate(ctx context.Context, p *engine.Prepared) (*engine.Prediction, error) {
	b.mu.Lock()
	b.calls = append(b.calls, p.Request.Query)
	b.mu.Unlock()
	b.started <- p.Request.Query
	if p.Request.Query == "block" {
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, fmt.Errorf("decode: %w", ctx.Err())
		}
	}
	return &engine.Prediction{Query: p.Request.Query, Width: p.Width, Height: p.Height,
		Detections: []engine.Detection{{Label: p.Request.Query, Box: [4]float64{0, 0, float64(p.Width), float64(p.Height)}}}}, nil
}

func (b *blockingEngine) Overlay(*engine.Prepared, *engine.Prediction) ([]byte, error) {
	return nil, errors.New("no overlay in this double")
}
func (b *blockingEngine) Info() engine.Info { return engine.Info{Model: "double", Backend: "test"} }
func (b *blockingEngine) Close() error      { return nil }

func (b *blockingEngine) ran(query string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range b.calls {
		if q == query {
			return true
		}
	}
	return false
}

// singleMachineConfig is the embedded default in a temp dir, read from the environment
// the way main reads it.
func singleMachineConfig(t *testing.T, dataDir, natsAddr string) Config {
	t.Helper()
	images, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"LA_DATA_DIR": dataDir, "LA_NATS_LISTEN": natsAddr, "LA_FILE_ROOTS": images,
		"LA_METRICS_ADDR": "127.0.0.1:0", "LA_HTTP_ADDR": "127.0.0.1:0", "LA_PREFETCH": "1", "LA_POLL_WAIT": "200ms",
		"LA_WORKER_NAME": "w1", "LA_GRACE": "30s", "LA_ACK_WAIT": "30s", "LA_BACKOFF": "30s",
	} {
		t.Setenv(k, v)
	}
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// workerRun is runWorker on its own goroutine; wait returns its result (once, cached).
type workerRun struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func (w *workerRun) wait() error {
	w.once.Do(func() { w.err = <-w.done })
	return w.err
}

func startWorker(t *testing.T, cfg Config, eng engine.Engine) *workerRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &workerRun{cancel: cancel, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		w.done <- runWorker(ctx, cfg, log, func(context.Context, Config) (engine.Engine, error) { return eng, nil })
	}()
	t.Cleanup(func() { cancel(); _ = w.wait() })
	return w
}

// publisher connects to the worker's embedded NATS once it is up.
func publisher(t *testing.T, addr string) jetstream.JetStream {
	t.Helper()
	var nc *nats.Conn
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		if nc, err = nats.Connect("nats://" + addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker's NATS never came up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the worker to create the topology.
	for {
		if _, err := js.Stream(t.Context(), jobs.JobsStream); err == nil {
			return js
		}
		if time.Now().After(deadline) {
			t.Fatal("worker never created its streams")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func publishJob(t *testing.T, js jetstream.JetStream, id, query string) {
	t.Helper()
	img, _ := filepath.Abs("testdata/dog.jpg")
	b, _ := json.Marshal(jobs.Job{ID: id, Image: "file://" + img, Query: query})
	if _, err := js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

func readResult(t *testing.T, dataDir, id string) (jobs.Result, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "results", id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return jobs.Result{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var r jobs.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result %s: %v", id, err)
	}
	return r, true
}

func TestSIGTERMDrainsAndLosesNothing(t *testing.T) {
	dataDir := t.TempDir()
	addr := freeport.MustAddr(t)
	cfg := singleMachineConfig(t, dataDir, addr)
	eng := newBlockingEngine()
	w := startWorker(t, cfg, eng)
	js := publisher(t, addr)

	publishJob(t, js, "in-flight", "block")
	if q := <-eng.started; q != "block" {
		t.Fatalf("first job run: %q", q)
	}
	publishJob(t, js, "queued-1", "q1")
	publishJob(t, js, "queued-2", "q2")

	w.cancel() // what SIGTERM does in main
	select {
	case err := <-w.done:
		t.Fatalf("worker exited (%v) before its running job finished", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(eng.release)
	if err := w.wait(); err != nil {
		t.Fatalf("worker exit after drain: %v; want nil (exit 0)", err)
	}
	if r, ok := readResult(t, dataDir, "in-flight"); !ok || r.Status != jobs.StatusSucceeded {
		t.Fatalf("in-flight job: stored=%v status %s; want it finished in the drain", ok, r.Status)
	}
	for _, id := range []string{"queued-1", "queued-2"} {
		if _, ok := readResult(t, dataDir, id); ok {
			t.Errorf("%s ran after the stop", id)
		}
	}

	// The queued jobs survive in the embedded store; the next start runs them.
	eng2 := newBlockingEngine()
	startWorker(t, cfg, eng2)
	deadline := time.Now().Add(time.Minute)
	for _, id := range []string{"queued-1", "queued-2"} {
		for {
			if r, ok := readResult(t, dataDir, id); ok {
				if r.Status != jobs.StatusSucceeded || r.Worker != "w1" {
					t.Errorf("%s: status %s worker %s", id, r.Status, r.Worker)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never finished after the restart", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if eng2.ran("block") {
		t.Error("the drained job ran again after the restart")
	}
}

func TestWorkerRefusesToStartWithoutEngine(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("LA_WEIGHTS_DIR", "")
	t.Setenv("LA_MODEL_PATH", "")
	t.Setenv("LA_NATS_LISTEN", freeport.MustAddr(t))
	t.Setenv("LA_METRICS_ADDR", "off")
	t.Setenv("LA_HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("LA_LOG_FORMAT", "json")
	t.Setenv("HF_HUB_CACHE", t.TempDir()) // no snapshot there, and no bundled model beside the test binary
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
		{"LA_MAX_NEW_TOKENS", "2000", "LA_MAX_NEW_TOKENS"},
		{"LA_WORKER_NAME", "a.b", "LA_WORKER_NAME"},
		{"LA_ACK_WAIT", "soon", "ACK_WAIT"},
		{"LA_MAX_DELIVER", "2", "back-off"},
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

func TestConfigSingleMachineDefaults(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LA_DATA_DIR", dir)
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS.URL != "" || cfg.NATSListen != "127.0.0.1:4222" || cfg.Engine != "cpu" || cfg.MaxSeqLen != 4096 ||
		cfg.MaxNewTokens != 128 || cfg.MaxNewTokensCap != 1024 || cfg.HTTPAddr != ":20000" || cfg.Prefetch != 2 {
		t.Errorf("defaults: %+v", cfg)
	}
	if want := "file://" + filepath.Join(dir, "results") + "/"; cfg.ResultsURL != want {
		t.Errorf("results %q, want %q", cfg.ResultsURL, want)
	}
	if len(cfg.FileRoots) != 1 || cfg.FileRoots[0] != "/" {
		t.Errorf("file roots %v, want / (embedded NATS on loopback: any local file)", cfg.FileRoots)
	}
	if got, want := cfg.topology(), jobs.DefaultTopologyConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("worker topology defaults %+v differ from jobs.DefaultTopologyConfig %+v", got, want)
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
	if cfg.Endpoint != "minio:9000" || cfg.ResultsURL != "s3://results/" || len(cfg.FileRoots) != 0 {
		t.Errorf("storage: endpoint %q results %q roots %v", cfg.Endpoint, cfg.ResultsURL, cfg.FileRoots)
	}
	if len(cfg.BackOff) != 0 {
		t.Errorf("LA_BACKOFF= gave %v; want no back-off", cfg.BackOff)
	}
}

// TestConfigIgnoresUnprefixedNames: only LA_* variables configure the worker. envconfig
// falls back to a field's bare tag when the prefixed name is unset, so the tags carry the
// full names; an ENGINE or HTTP_ADDR that some other tool set must change nothing.
func TestConfigIgnoresUnprefixedNames(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("ENGINE", "ttnn")
	t.Setenv("HTTP_ADDR", ":1")
	t.Setenv("PREFETCH", "9")
	t.Setenv("HTTP_MAX_PENDING", "1")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engine != "cpu" || cfg.HTTPAddr != ":20000" || cfg.Prefetch != 2 || cfg.HTTP.MaxPending == 1 {
		t.Fatalf("unprefixed variables were read: engine %q http %q prefetch %d max pending %d",
			cfg.Engine, cfg.HTTPAddr, cfg.Prefetch, cfg.HTTP.MaxPending)
	}
	t.Setenv("LA_ENGINE", "ttnn")
	if cfg, err = loadConfig(); err != nil || cfg.Engine != "ttnn" {
		t.Fatalf("LA_ENGINE=ttnn gave engine %q (%v)", cfg.Engine, err)
	}
}
