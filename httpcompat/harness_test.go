package httpcompat

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
)

// harness is a ready server on a real chip owner over the engine double, behind httptest.
type harness struct {
	eng  *enginetest.Engine
	chip *chip.Chip
	srv  *Server
	url  string
}

type setup struct {
	cfg       Config
	opts      Options
	configure func(*enginetest.Engine)
	notReady  bool
}

func newHarness(t testing.TB, s setup) *harness {
	t.Helper()
	eng := enginetest.New()
	if s.configure != nil {
		s.configure(eng)
	}
	c, err := chip.Open(func() (engine.Engine, error) { return eng, nil })
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, s.cfg, s.opts)
	if !s.notReady {
		if err := srv.SetReady(c); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		_ = c.Close()
	})
	return &harness{eng: eng, chip: c, srv: srv, url: ts.URL}
}

func (h *harness) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	return do(t, context.Background(), http.MethodGet, h.url+path, nil)
}

func (h *harness) predict(t *testing.T, body any) (int, []byte) {
	t.Helper()
	return postPredict(t, context.Background(), h.url, body)
}

func postPredict(t *testing.T, ctx context.Context, url string, body any) (int, []byte) {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	return do(t, ctx, http.MethodPost, url+"/predict", raw)
}

func do(t *testing.T, ctx context.Context, method, url string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	return resp.StatusCode, out
}

// dogB64 is testdata/dog.jpg (768x576) in base64.
func dogB64(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// object decodes a JSON object keeping numbers as written, so a test can tell 12 from 12.0.
func object(t *testing.T, body []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %.300s", err, body)
	}
	return m
}

// detailString is the message of a FastAPI HTTPException body {"detail": "..."}.
func detailString(t *testing.T, body []byte) string {
	t.Helper()
	m := object(t, body)
	assertKeys(t, "error body", m, "detail")
	s, ok := m["detail"].(string)
	if !ok {
		t.Fatalf("detail is %T, want a string: %s", m["detail"], body)
	}
	if strings.Contains(s, "goroutine ") || strings.Contains(s, ".go:") {
		t.Fatalf("detail leaks a stack trace: %s", s)
	}
	return s
}

func assertKeys(t *testing.T, what string, m map[string]any, want ...string) {
	t.Helper()
	got := make([]string, 0, len(m))
	for k := range m {
		got = append(got, k)
	}
	if len(got) != len(want) {
		t.Fatalf("%s has keys %v, want exactly %v", what, got, want)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Fatalf("%s has keys %v, want exactly %v (missing %q)", what, got, want, k)
		}
	}
}

// JSON type checks on values decoded with UseNumber.

func isInt(v any) bool {
	n, ok := v.(json.Number)
	return ok && !strings.ContainsAny(string(n), ".eE")
}

// isFloat is a number Python's json module would read back as a float.
func isFloat(v any) bool {
	n, ok := v.(json.Number)
	return ok && strings.ContainsAny(string(n), ".eE")
}

func isString(v any) bool { _, ok := v.(string); return ok }
func isBool(v any) bool   { _, ok := v.(bool); return ok }

func list(t *testing.T, what string, v any, n int, elem func(any) bool) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s is %T (%v), want a list", what, v, v)
	}
	if n >= 0 && len(l) != n {
		t.Fatalf("%s has %d elements, want %d", what, len(l), n)
	}
	for i, e := range l {
		if elem != nil && !elem(e) {
			t.Fatalf("%s[%d] = %v (%T) has the wrong JSON type", what, i, e, e)
		}
	}
	return l
}

// waitQueued waits until n requests wait for the chip: a synchronisation point, not a timer.
func waitQueued(t *testing.T, c *chip.Chip, n int) {
	t.Helper()
	testwait.Until(t, time.Minute, fmt.Sprintf("%d requests to wait for the chip", n), func() bool { return c.Waiting() >= n })
}

// messageSignal is a slog handler that reports each record whose message is msg.
type messageSignal struct {
	msg  string
	seen chan struct{}
}

func (h *messageSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *messageSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.seen <- struct{}{}
	}
	return nil
}
func (h *messageSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *messageSignal) WithGroup(string) slog.Handler      { return h }

// testConfig is a complete server configuration for tests: the worker's values, with a
// test's own settings where it gives them (its non-zero fields).
func testConfig(own Config) Config {
	c := Config{
		Addr: "127.0.0.1:0", MaxBodyBytes: 64 << 20, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 2 * time.Minute, WriteTimeout: 10 * time.Minute, IdleTimeout: 2 * time.Minute,
		ShutdownTimeout: 90 * time.Second, MaxPending: 64, MaxUploading: 256, BodyTimeout: 10 * time.Second,
		MinBodyRate: 64 << 10, MaxDecodedBytes: 2 << 30,
	}
	for _, set := range []struct {
		ok  bool
		set func()
	}{
		{own.Addr != "", func() { c.Addr = own.Addr }},
		{own.MaxBodyBytes != 0, func() { c.MaxBodyBytes = own.MaxBodyBytes }},
		{own.ReadHeaderTimeout != 0, func() { c.ReadHeaderTimeout = own.ReadHeaderTimeout }},
		{own.ReadTimeout != 0, func() { c.ReadTimeout = own.ReadTimeout }},
		{own.WriteTimeout != 0, func() { c.WriteTimeout = own.WriteTimeout }},
		{own.IdleTimeout != 0, func() { c.IdleTimeout = own.IdleTimeout }},
		{own.ShutdownTimeout != 0, func() { c.ShutdownTimeout = own.ShutdownTimeout }},
		{own.MaxPending != 0, func() { c.MaxPending = own.MaxPending }},
		{own.MaxUploading != 0, func() { c.MaxUploading = own.MaxUploading }},
		{own.BodyTimeout != 0, func() { c.BodyTimeout = own.BodyTimeout }},
		{own.MinBodyRate != 0, func() { c.MinBodyRate = own.MinBodyRate }},
		{own.MaxDecodedBytes != 0, func() { c.MaxDecodedBytes = own.MaxDecodedBytes }},
		{own.ImageURLs, func() { c.ImageURLs = true }},
		{own.Token != "", func() { c.Token = own.Token }},
	} {
		if set.ok {
			set.set()
		}
	}
	return c
}

// newServer is New with testConfig(own), failing the test on an error.
func newServer(t testing.TB, own Config, opts Options) *Server {
	t.Helper()
	srv, err := New(testConfig(own), opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// serveChip is a test server of a default /predict server answering with c, closed when
// the test ends.
func serveChip(t testing.TB, c *chip.Chip) *httptest.Server {
	t.Helper()
	srv := newServer(t, Config{}, Options{})
	if err := srv.SetReady(c); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}
