package jobs

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	_ "image/jpeg"
	"image/png"
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
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// maxPixels is the double's pixel limit, like a real engine's header check.
const maxPixels = 100_000_000

// fakeEngine is a test double for engine.Engine: Prepare reads only the image header,
// Generate returns one box covering the whole image, labelled with the query, after a
// configurable number of 1 ms "decode steps" (checking ctx between steps). Queries named
// "block" run until their ctx ends or release is closed; "device-busy" always fails
// with an error that is not an InputError; "panic" panics in Prepare.
type fakeEngine struct {
	steps   int
	started chan string // receives the query of each Generate that starts (if not nil)
	release chan struct{}

	mu    sync.Mutex
	calls map[string]int // Generate calls by query
}

func newFakeEngine(steps int) *fakeEngine {
	return &fakeEngine{steps: steps, release: make(chan struct{}), calls: map[string]int{}}
}

func (f *fakeEngine) Prepare(ctx context.Context, req engine.Request) (*engine.Prepared, error) {
	if req.Query == "panic" {
		panic("decoder bug")
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(req.Image))
	if err != nil {
		return nil, engine.InputErrorf(engine.CodeBadImage, "image cannot be decoded: %v", err)
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxPixels {
		return nil, engine.InputErrorf(engine.CodeImageTooLarge, "image is %dx%d, over %d pixels", cfg.Width, cfg.Height, maxPixels)
	}
	return &engine.Prepared{Request: req, Width: cfg.Width, Height: cfg.Height, PreprocessMS: 0.5}, nil
}

func (f *fakeEngine) Generate(ctx context.Context, p *engine.Prepared) (*engine.Prediction, error) {
	f.mu.Lock()
	f.calls[p.Request.Query]++
	f.mu.Unlock()
	if f.started != nil {
		f.started <- p.Request.Query
	}
	if p.Request.Query == "device-busy" {
		return nil, errors.New("device busy") // not an InputError: worth retrying
	}
	if p.Request.Query == "block" {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("decode: %w", ctx.Err())
		case <-f.release:
		}
	}
	for range f.steps {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	w, h := float64(p.Width), float64(p.Height)
	return &engine.Prediction{
		Query: p.Request.Query, Width: p.Width, Height: p.Height,
		Detections: []engine.Detection{{Label: p.Request.Query, Box: [4]float64{0, 0, w, h}, BoxNorm: [4]int{0, 0, 1000, 1000}}},
		Points:     []engine.Point{},
		RawText:    "<ref>" + p.Request.Query + "</ref><box><0><0><1000><1000></box>",
		TimingMS:   engine.Timing{Vision: 1, Prefill: 1, Decode: float64(f.steps), Total: 2 + float64(f.steps)},
	}, nil
}

func (f *fakeEngine) Overlay(p *engine.Prepared, pred *engine.Prediction) ([]byte, error) {
	img := image.NewGray(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.White)
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (f *fakeEngine) Info() engine.Info { return engine.Info{Model: "fake", Backend: "test"} }
func (f *fakeEngine) Close() error      { return nil }

func (f *fakeEngine) Calls(query string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[query]
}

func (f *fakeEngine) Total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
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
		AccessKey: e.s3.AccessKey, SecretKey: e.s3.SecretKey, PathStyle: "true",
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
	topo, err := EnsureTopology(t.Context(), js, cfg)
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
		Worker: worker, DefaultOutput: defaultOutput, PollWait: 200 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond, RetryDelayMax: 500 * time.Millisecond,
		OpTimeout: 10 * time.Second, Grace: 10 * time.Second, Logger: e.log,
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
	c, err := chip.Open(func() (engine.Engine, error) { return eng, nil })
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

// eventually polls cond every 20 ms until it is true or the wait (generous, not a timing
// assertion) runs out.
func eventually(t *testing.T, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", wait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publishedResult waits for the result of id on la.results.<batch>.<id>.
func (e *testEnv) publishedResult(t *testing.T, batch, id string) Result {
	t.Helper()
	var raw *jetstream.RawStreamMsg
	eventually(t, 60*time.Second, "the result of "+id, func() bool {
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
	return r
}

// storedResult reads <output>/<id>.json.
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
	return r
}

// dlqRecord returns the dead-letter record of id, or nil if there is none.
func (e *testEnv) dlqRecord(t *testing.T, id string) *DLQRecord {
	t.Helper()
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

// pngHeader is a PNG signature and IHDR chunk claiming w x h pixels, and nothing else.
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2 // 8-bit RGB
	chunk := append([]byte("IHDR"), ihdr...)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	b.Write(chunk)
	_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}
