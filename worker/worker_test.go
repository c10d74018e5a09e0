package worker

import (
	"context"
	"encoding/json"
	"errors"
	_ "image/jpeg"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/syncbuf"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

// testImages holds the photographs the tests send (dog.jpg).
const testImages = "../testdata/images"

// randomCheckpoint is the small random-weight checkpoint with PyTorch goldens that the
// engine's parity tests use: the tests here need a model that runs, not one that finds.
const randomCheckpoint = "../testdata/checkpoints/tiny-bf16"

// singleMachineConfig is the embedded default in a temp dir, read from the environment the
// way cmd/worker reads it.
func singleMachineConfig(t *testing.T, dataDir, natsAddr string) config.Worker {
	t.Helper()
	images, err := filepath.Abs(testImages)
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
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// defaultConfig is the configuration with every default and nothing from the environment
// but what the test set.
func defaultConfig(t *testing.T) config.Worker {
	t.Helper()
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// fixedEngine opens eng for every chip.
func fixedEngine(eng engine.Engine) EngineOpener {
	return func(context.Context, config.Worker, int, *slog.Logger) (engine.Engine, error) { return eng, nil }
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

// exited says whether Run has returned by now, and with what.
func (w *workerRun) exited() (bool, error) {
	select {
	case err := <-w.done:
		w.once.Do(func() { w.err = err })
		return true, w.err
	default:
		return false, nil
	}
}

func startWorker(t *testing.T, cfg config.Worker, eng engine.Engine) *workerRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &workerRun{cancel: cancel, done: make(chan error, 1)}
	logged := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logged, nil))
	go func() {
		w.done <- Run(ctx, cfg, Options{Log: log, Open: fixedEngine(eng)})
	}()
	t.Cleanup(func() {
		cancel()
		_ = w.wait()
		checkLogLines(t, logged.String())
	})
	return w
}

// checkLogLines fails for a log record that names an attribute twice (a logger With'd
// the same key at two levels), which log collectors resolve differently.
func checkLogLines(t *testing.T, logs string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Errorf("log line is not a JSON object: %s", line)
			continue
		}
		seen := map[string]bool{}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				t.Errorf("log line %s: %v", line, err)
				break
			}
			if seen[key.(string)] {
				t.Errorf("log record names %q twice: %s", key, line)
			}
			seen[key.(string)] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Errorf("log line %s: %v", line, err)
				break
			}
		}
	}
}

// publisher connects to the worker's embedded NATS once it is up and has its streams.
func publisher(t *testing.T, addr string) jetstream.JetStream {
	t.Helper()
	var nc *nats.Conn
	testwait.Until(t, time.Minute, "the worker's NATS server", func() bool {
		var err error
		nc, err = nats.Connect("nats://" + addr)
		return err == nil
	})
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the worker's streams and consumer", func() bool {
		for _, stream := range []string{jobs.JobsStream, jobs.ResultsStream, jobs.DLQStream} {
			if _, err := js.Stream(t.Context(), stream); err != nil {
				return false
			}
		}
		_, err := js.Consumer(t.Context(), jobs.JobsStream, jobs.ConsumerName)
		return err == nil
	})
	return js
}

func publishJob(t *testing.T, js jetstream.JetStream, id, query string) {
	t.Helper()
	img, _ := filepath.Abs(testImages + "/dog.jpg")
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
	started, release := make(chan string, 16), make(chan struct{})
	eng := enginetest.New()
	eng.Started, eng.Release = started, release // every job holds the chip until release
	w := startWorker(t, cfg, eng)
	js := publisher(t, addr)

	publishJob(t, js, "in-flight", "block")
	if q := <-started; q != "block" {
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
	close(release)
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
	eng2 := enginetest.New()
	startWorker(t, cfg, eng2)
	for _, id := range []string{"queued-1", "queued-2"} {
		var r jobs.Result
		testwait.Until(t, time.Minute, id+" finished after the restart", func() bool {
			var ok bool
			r, ok = readResult(t, dataDir, id)
			return ok
		})
		if r.Status != jobs.StatusSucceeded || r.Worker != "w1" {
			t.Errorf("%s: status %s worker %s", id, r.Status, r.Worker)
		}
	}
	if eng2.Calls("block") != 0 {
		t.Error("the drained job ran again after the restart")
	}
}

// runJobs publishes each case as a job under its map key (id and Nats-Msg-Id) and returns
// every job's first published result, with the message's bytes.
func runJobs(t *testing.T, js jetstream.JetStream, cases map[string]jobs.Job) (map[string]jobs.Result, map[string][]byte) {
	t.Helper()
	results, err := js.OrderedConsumer(t.Context(), jobs.ResultsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for id, job := range cases {
		job.ID = id
		b, _ := json.Marshal(job)
		if _, err := js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	got, raw := map[string]jobs.Result{}, map[string][]byte{}
	for len(got) < len(cases) {
		msg, err := results.Next(jetstream.FetchMaxWait(time.Minute))
		if err != nil {
			t.Fatalf("results so far %d of %d: %v", len(got), len(cases), err)
		}
		var r jobs.Result
		if err := json.Unmarshal(msg.Data(), &r); err != nil {
			t.Fatal(err)
		}
		if _, seen := got[r.ID]; !seen {
			got[r.ID], raw[r.ID] = r, msg.Data()
		}
	}
	return got, raw
}
