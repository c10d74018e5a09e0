package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/worker"
)

const testImages = "../testdata/images"

// testToken is LA_CONSOLE_TOKEN in the tests.
const testToken = "console-test-token-0123456789"

// env is a worker's environment in a temp dir: the embedded NATS on loopback, the
// console on /predict's loopback address, file:// roots that hold the test images and
// inputs (a folder the test writes images into).
type env struct {
	dataDir string
	inputs  string // a folder jobs may read, which the test fills
	images  string // the test photographs
	cfg     config.Worker
	base    string // http://host:port of /predict
	js      jetstream.JetStream
	client  *http.Client
}

// newEnv reads the worker's configuration from the environment, as cmd/worker does, with
// vars on top of the test defaults.
func newEnv(t *testing.T, vars map[string]string) *env {
	t.Helper()
	images, err := filepath.Abs(testImages)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{dataDir: t.TempDir(), inputs: t.TempDir(), images: images}
	all := map[string]string{
		"LA_DATA_DIR": e.dataDir, "LA_NATS_LISTEN": freeport.MustAddr(t), "LA_FILE_ROOTS": images + "," + e.inputs,
		"LA_METRICS_ADDR": "off", "LA_HTTP_ADDR": freeport.MustAddr(t), "LA_PREFETCH": "1", "LA_POLL_WAIT": "200ms",
		"LA_WORKER_NAME": "w1", "LA_GRACE": "30s", "LA_ACK_WAIT": "30s", "LA_BACKOFF": "30s",
		"LA_CONSOLE_TOKEN": testToken, "LA_ENGINE": "sim", "LA_SIM_SPEED": "20", "LA_MAX_BATCH": "4",
	}
	for k, v := range vars {
		all[k] = v
	}
	for k, v := range all {
		t.Setenv(k, v)
	}
	if err := envconfig.Process("", &e.cfg); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("..")
	e.cfg.Weights.Dir = filepath.Join(root, "models", "tiny-shapes")
	if err := e.cfg.Finish(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	e.base = "http://" + e.cfg.HTTP.Addr
	jar, _ := cookiejar.New(nil)
	e.client = &http.Client{Jar: jar, Timeout: time.Minute}
	return e
}

// start runs the worker with open (the simulated chip when nil) until the test ends,
// connects a publisher to its NATS and waits for the console's API.
func (e *env) start(t *testing.T, open worker.EngineOpener) {
	t.Helper()
	e.run(t, open, "/console/api/overview")
}

// run runs the worker with open (the simulated chip when nil) until the test ends,
// connects a publisher to its NATS and waits until ready answers 200.
func (e *env) run(t *testing.T, open worker.EngineOpener, ready string) {
	t.Helper()
	if open == nil {
		open = worker.OpenEngine
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- worker.Run(ctx, e.cfg, worker.Options{Log: log, Open: open}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	var nc *nats.Conn
	testwait.Until(t, time.Minute, "the worker's NATS server", func() bool {
		var err error
		nc, err = nats.Connect("nats://" + e.cfg.Embedded.Listen)
		return err == nil
	})
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.js = js
	testwait.Until(t, time.Minute, ready, func() bool {
		resp, err := http.Get(e.base + ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// fixedOpener opens eng on every chip.
func fixedOpener(eng engine.Engine) worker.EngineOpener {
	return func(context.Context, config.Worker, int, *slog.Logger) (engine.Engine, error) { return eng, nil }
}

// publish sends job (its id as Nats-Msg-Id) to la.jobs.default.
func (e *env) publish(t *testing.T, job jobs.Job) {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b, jetstream.WithMsgID(job.ID)); err != nil {
		t.Fatal(err)
	}
}

// image is the file:// URL of a test photograph.
func (e *env) image(name string) string { return "file://" + filepath.Join(e.images, name) }

// storedResult reads job id's result file from the default output.
func (e *env) storedResult(t *testing.T, id string) (jobs.Result, []byte, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dataDir, "results", id+".json"))
	if os.IsNotExist(err) {
		return jobs.Result{}, nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var r jobs.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r, b, true
}

// waitResult waits for job id's stored result.
func (e *env) waitResult(t *testing.T, id string) jobs.Result {
	t.Helper()
	var r jobs.Result
	testwait.Until(t, 2*time.Minute, "the result of "+id, func() bool {
		var ok bool
		r, _, ok = e.storedResult(t, id)
		return ok
	})
	return r
}

// get is a GET of the console's path; it decodes a JSON answer into v (when not nil) and
// returns the status.
func (e *env) get(t *testing.T, path string, v any) int {
	t.Helper()
	resp, err := e.client.Get(e.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s (%d): %v: %s", path, resp.StatusCode, err, b)
		}
	}
	return resp.StatusCode
}

// post sends body as JSON with headers; it returns the status and the answer's bytes.
func (e *env) post(t *testing.T, path string, body any, headers map[string]string) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, e.base+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// signIn opens a session with the token and returns its CSRF token.
func (e *env) signIn(t *testing.T) string {
	t.Helper()
	code, body := e.post(t, "/console/api/session", map[string]string{"token": testToken}, nil)
	if code != http.StatusOK {
		t.Fatalf("sign in: %d %s", code, body)
	}
	var s struct{ CSRF string }
	if err := json.Unmarshal(body, &s); err != nil || s.CSRF == "" {
		t.Fatalf("sign in: %s", body)
	}
	return s.CSRF
}
