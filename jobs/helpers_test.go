package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// heldEngine is the engine double with a gate: each Generate sends its query on started
// (buffered for n) and then waits until the test closes release or the job's ctx ends. The
// tests name the job that waits there "block".
func heldEngine(n int) (eng *enginetest.Engine, started <-chan string, release chan struct{}) {
	ch := make(chan string, n)
	release = make(chan struct{})
	eng = enginetest.New()
	eng.Started, eng.Release = ch, release
	return eng, ch, release
}

// testEnv is one NATS server with the topology and one S3 server with two buckets:
// "images" (inputs) and "results" (the default output).
type testEnv struct {
	nats  *natsembed.Server
	js    jetstream.JetStream
	topo  *Topology
	s3    *s3test.Server
	store *storage.Router
	log   *slog.Logger
}

const defaultOutput = "s3://results/out/"

func newTestEnv(t *testing.T, cfg TopologyConfig) *testEnv {
	t.Helper()
	ns := natstest.Start(t)
	e := newTestEnvOn(t, ns.ClientURL(), cfg)
	e.nats = ns
	return e
}

// newTestEnvOn is a testEnv whose NATS is already running at url (a cluster, say).
func newTestEnvOn(t *testing.T, url string, cfg TopologyConfig) *testEnv {
	t.Helper()
	e := &testEnv{s3: s3test.Start(t)}
	e.s3.CreateBucket(t, "images")
	e.s3.CreateBucket(t, "results")
	var err error
	e.store, err = storage.Open(storage.Config{
		Endpoint: "http://" + e.s3.Endpoint, Region: s3test.Region,
		AccessKey: e.s3.AccessKey, SecretKey: e.s3.SecretKey, PathStyle: "true", MaxImageBytes: 32 << 20,
	})
	if err != nil {
		t.Fatalf("open storage: %v", err)
	}
	t.Cleanup(func() { _ = e.store.Close() })
	e.js, e.topo = connectTopologyURL(t, url, cfg)
	e.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return e
}

// connectTopology opens a connection of its own (as a separate worker process would) and
// ensures the topology over it.
func connectTopology(t testing.TB, s *natsembed.Server, cfg TopologyConfig) (jetstream.JetStream, *Topology) {
	t.Helper()
	return connectTopologyURL(t, s.ClientURL(), cfg)
}

func connectTopologyURL(t testing.TB, url string, cfg TopologyConfig) (jetstream.JetStream, *Topology) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	topo, err := EnsureTopology(t.Context(), js, completeTopology(cfg))
	if err != nil {
		t.Fatalf("ensure topology: %v", err)
	}
	return js, topo
}

// testWriter sends log lines to t.Log so they show only for failing tests.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// testRunnerConfig is fast: short polls and retry delays.
func (e *testEnv) runnerConfig(worker string) RunnerConfig {
	return RunnerConfig{
		Worker: worker, DefaultOutput: defaultOutput, Prefetch: 2, Logger: e.log,
		RunnerTiming: RunnerTiming{PollWait: 200 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
			RetryDelayMax: 500 * time.Millisecond, OpTimeout: 10 * time.Second, Grace: 10 * time.Second},
	}
}

// runner is a Runner started on its own chip; stop ends it and waits.
type runner struct {
	*Runner
	cancel context.CancelFunc
	done   chan error
	chip   *chip.Chip

	once    sync.Once
	stopErr error
}

func (r *runner) stop(t testing.TB) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		r.stopErr = errors.Join(<-r.done, r.chip.Close())
	})
	if r.stopErr != nil {
		t.Errorf("stop runner: %v", r.stopErr)
	}
}

func startRunner(t testing.TB, topo *Topology, store storage.Store, eng engine.Engine, cfg RunnerConfig) *runner {
	t.Helper()
	return startRunnerWith(t, topo, store, func() (engine.Engine, error) { return eng, nil }, cfg)
}

// startRunnerWith starts a runner on a chip that opens its engine with open, on the chip's
// own thread (a native or simulated engine needs that).
func startRunnerWith(t testing.TB, topo *Topology, store storage.Store, open func() (engine.Engine, error), cfg RunnerConfig) *runner {
	t.Helper()
	c, err := chip.Open(open)
	if err != nil {
		t.Fatalf("open chip: %v", err)
	}
	r, err := NewRunner(topo, store, c, cfg)
	if err != nil {
		t.Fatalf("new runner: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runner{Runner: r, cancel: cancel, done: make(chan error, 1), chip: c}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() { rr.stop(t) })
	return rr
}

// putImage uploads data to s3://images/<key> and returns the URL.
func (e *testEnv) putImage(t *testing.T, key string, data []byte) string {
	t.Helper()
	_, err := e.s3.Client(t).PutObject(t.Context(), "images", key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	if err != nil {
		t.Fatalf("upload %s: %v", key, err)
	}
	return "s3://images/" + key
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// publish sends raw job bytes with msgID as Nats-Msg-Id (none if empty).
func (e *testEnv) publish(t *testing.T, data []byte, msgID string) {
	t.Helper()
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if _, err := e.js.Publish(t.Context(), JobSubject(DefaultClass), data, opts...); err != nil {
		t.Fatalf("publish job: %v", err)
	}
}

func (e *testEnv) publishJob(t *testing.T, j Job) {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	e.publish(t, b, j.ID)
}

// publishedResult waits for the result of id on la.results.<batch>.<id>; it must match
// the result schema.
func (e *testEnv) publishedResult(t *testing.T, batch, id string) Result {
	t.Helper()
	var raw *jetstream.RawStreamMsg
	testwait.Until(t, 60*time.Second, "the result of "+id, func() bool {
		m, err := e.topo.Results.GetLastMsgForSubject(t.Context(), ResultSubject(batch, id))
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("read result of %s: %v", id, err)
		}
		raw = m
		return m != nil
	})
	var r Result
	if err := json.Unmarshal(raw.Data, &r); err != nil {
		t.Fatalf("result of %s is not JSON: %v\n%s", id, err, raw.Data)
	}
	checkResultSchema(t, raw.Data)
	return r
}

// storedResult reads <output>/<id>.json; it must match the result schema.
func (e *testEnv) storedResult(t *testing.T, output, id string) Result {
	t.Helper()
	b, err := e.store.Get(t.Context(), ResultURL(output, id), 0)
	if err != nil {
		t.Fatalf("read stored result of %s: %v", id, err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("stored result of %s is not JSON: %v", id, err)
	}
	checkResultSchema(t, b)
	return r
}

// dlqRecord returns the dead-letter record of id, or nil if there is none. Call it once
// the job has ended: it first waits for the job's terminal state, which is written after
// the result is published and the DLQ record stored, so a record still being written is
// not taken for none.
func (e *testEnv) dlqRecord(t *testing.T, id string) *DLQRecord {
	t.Helper()
	testwait.Until(t, 30*time.Second, "the terminal state of "+id, func() bool {
		st, ok, err := e.topo.State.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("read state of %s: %v", id, err)
		}
		return ok && st.Status.Terminal()
	})
	m, err := e.topo.DLQ.GetLastMsgForSubject(t.Context(), DLQSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("read DLQ of %s: %v", id, err)
	}
	var rec DLQRecord
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		t.Fatalf("DLQ record of %s is not JSON: %v", id, err)
	}
	return &rec
}

// queueDrained reports whether the shared consumer has nothing pending or unacked.
func (e *testEnv) queueDrained(t *testing.T) bool {
	info, err := e.topo.Consumer.Info(t.Context())
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0
}

// completeTopology fills the settings a test leaves zero with the worker's values (its
// defaults in package config), so each test names only what it is about.
func completeTopology(c TopologyConfig) TopologyConfig {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.ResultsMaxAge == 0 {
		c.ResultsMaxAge = 7 * 24 * time.Hour
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = 30 * 24 * time.Hour
	}
	if c.StateMaxAge == 0 {
		c.StateMaxAge = 7 * 24 * time.Hour
	}
	if c.AckWait == 0 {
		c.AckWait = time.Minute
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 10
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 1024
	}
	return c
}
