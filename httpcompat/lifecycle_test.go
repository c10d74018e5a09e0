package httpcompat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
)

// runJob sends a queued job through the same chip, the way the job runner does.
func runJob(ctx context.Context, h *harness, query string) <-chan error {
	out := make(chan error, 1)
	go func() {
		prep, err := h.eng.Prepare(ctx, engine.Request{Image: dogJPEG, Query: query})
		if err == nil {
			var pred *engine.Prediction
			pred, err = h.chip.Generate(ctx, chip.Batch, prep)
			if err == nil && pred.Query != query {
				err = fmt.Errorf("job %q got the answer for %q", query, pred.Query)
			}
		}
		out <- err
	}()
	return out
}

// dogJPEG is testdata/dog.jpg.
var dogJPEG = func() []byte {
	b, err := os.ReadFile("testdata/dog.jpg")
	if err != nil {
		panic(err)
	}
	return b
}()

// asyncPredict posts a request on its own goroutine and reports its status and query echo.
func asyncPredict(ctx context.Context, url, img, query string) <-chan string {
	out := make(chan string, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/predict",
			strings.NewReader(fmt.Sprintf(`{"image": %q, "query": %q}`, img, query)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		var body struct {
			Query string `json:"query"`
		}
		decodeErr := json.NewDecoder(resp.Body).Decode(&body)
		out <- fmt.Sprintf("%d %s%v", resp.StatusCode, body.Query, errString(decodeErr))
	}()
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func TestConcurrentClientsAreSerializedAndJobsProgress(t *testing.T) {
	h := newHarness(t, setup{configure: func(e *enginetest.Engine) { e.Delay = time.Millisecond }})
	img := dogB64(t)
	const clients, jobs = 8, 8
	var replies []<-chan string
	var done []<-chan error
	for i := range max(clients, jobs) {
		if i < clients {
			replies = append(replies, asyncPredict(t.Context(), h.url, img, fmt.Sprintf("client-%d", i)))
		}
		if i < jobs {
			done = append(done, runJob(t.Context(), h, fmt.Sprintf("job-%d", i)))
		}
	}
	for i, r := range replies {
		if got, want := <-r, fmt.Sprintf("200 client-%d", i); got != want {
			t.Errorf("client %d: %q, want %q", i, got, want)
		}
	}
	for i, d := range done {
		if err := <-d; err != nil {
			t.Errorf("job %d: %v", i, err)
		}
	}
	if n := h.eng.MaxConcurrent(); n != 1 {
		t.Errorf("%d requests ran on the chip at once, want 1", n)
	}
	seen := h.eng.Seen()
	slices.Sort(seen)
	var want []string
	for i := range clients {
		want = append(want, fmt.Sprintf("client-%d", i))
	}
	for i := range jobs {
		want = append(want, fmt.Sprintf("job-%d", i))
	}
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Errorf("the chip ran %v, want each request once: %v", seen, want)
	}
}

func TestPredictGoesAheadOfQueuedJobs(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 8)
	h := newHarness(t, setup{configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started }})
	running := runJob(t.Context(), h, "job-running")
	<-started
	queued := runJob(t.Context(), h, "job-queued")
	waitQueued(t, h.chip, 1)
	reply := asyncPredict(t.Context(), h.url, dogB64(t), "client")
	waitQueued(t, h.chip, 2)
	close(release)

	if got := <-reply; got != "200 client" {
		t.Fatalf("client: %q", got)
	}
	for _, d := range []<-chan error{running, queued} {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if got, want := h.eng.Seen(), []string{"job-running", "client", "job-queued"}; !slices.Equal(got, want) {
		t.Fatalf("chip order %v, want %v", got, want)
	}
}

func TestClientGoneIsDroppedBeforeTheChip(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 8)
	gone := &messageSignal{msg: "predict: client went away", seen: make(chan struct{}, 1)}
	h := newHarness(t, setup{
		opts:      Options{Logger: slog.New(gone)},
		configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started },
	})
	running := runJob(t.Context(), h, "job-running")
	<-started

	ctx, hangUp := context.WithCancel(t.Context())
	reply := asyncPredict(ctx, h.url, dogB64(t), "client-gone")
	waitQueued(t, h.chip, 1)
	hangUp()
	if got := <-reply; !strings.HasPrefix(got, "error:") {
		t.Fatalf("the client hung up, yet got %q", got)
	}
	<-gone.seen // the server has noticed and given up its place

	close(release)
	if err := <-running; err != nil {
		t.Fatal(err)
	}
	if err := <-runJob(t.Context(), h, "job-after"); err != nil {
		t.Fatal(err)
	}
	if got, want := h.eng.Seen(), []string{"job-running", "job-after"}; !slices.Equal(got, want) {
		t.Fatalf("chip ran %v, want %v: the gone client must never reach it", got, want)
	}
}

func TestPredictTimesOutWhileTheChipIsBusy(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 8)
	h := newHarness(t, setup{
		cfg:       Config{WriteTimeout: 300 * time.Millisecond},
		configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started },
	})
	running := runJob(t.Context(), h, "job-running")
	<-started
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "late"})
	close(release)
	if status != http.StatusServiceUnavailable || !strings.Contains(detailString(t, body), "did not finish within") {
		t.Fatalf("status %d %s, want 503 timed out", status, body)
	}
	if err := <-running; err != nil {
		t.Fatal(err)
	}
}

func TestPredictBeyondMaxPendingIs503(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 8)
	h := newHarness(t, setup{
		cfg:       Config{MaxPending: 2},
		configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started },
	})
	img := dogB64(t)
	first := asyncPredict(t.Context(), h.url, img, "first")
	<-started
	second := asyncPredict(t.Context(), h.url, img, "second")
	waitQueued(t, h.chip, 1)
	status, body := h.predict(t, map[string]any{"image": img, "query": "third"})
	if status != http.StatusServiceUnavailable || !strings.Contains(detailString(t, body), "LA_HTTP_MAX_PENDING") {
		t.Fatalf("third request: %d %s, want 503 naming LA_HTTP_MAX_PENDING", status, body)
	}
	close(release)
	for _, r := range []<-chan string{first, second} {
		if got := <-r; !strings.HasPrefix(got, "200 ") {
			t.Fatalf("a request within the bound got %q", got)
		}
	}
	// The handlers return just after their answers are written.
	testwait.Until(t, time.Minute, "the answered handlers to return", func() bool { return h.srv.pending.Load() == 0 })
	if status, body := h.predict(t, map[string]any{"image": img, "query": "later"}); status != http.StatusOK {
		t.Fatalf("after the burst: %d %s", status, body)
	}
}

func TestPredictOnAClosedChipIs503(t *testing.T) {
	h := newHarness(t, setup{})
	if err := h.chip.Close(); err != nil {
		t.Fatal(err)
	}
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog"})
	if status != http.StatusServiceUnavailable || !strings.Contains(detailString(t, body), "shutting down") {
		t.Fatalf("status %d %s, want 503 shutting down", status, body)
	}
}

// panicDevice is a double for one edge case: a bug that panics inside the request.
type panicDevice struct{ Device }

func (panicDevice) Generate(context.Context, chip.Priority, *engine.Prepared) (*engine.Prediction, error) {
	panic("index out of range [7] with length 3")
}

func TestPanicBecomes500WithoutAStack(t *testing.T) {
	h := newHarness(t, setup{notReady: true})
	if err := h.srv.SetReady(panicDevice{h.chip}); err != nil {
		t.Fatal(err)
	}
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog"})
	if status != http.StatusInternalServerError || detailString(t, body) != "RuntimeError: internal error" {
		t.Fatalf("status %d %s", status, body)
	}
}

// serveOnPort runs srv on a real listener, as the worker does.
func serveOnPort(t *testing.T, ctx context.Context, srv *Server) (url string, served <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan error, 1)
	go func() { out <- srv.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), out
}

func TestShutdownUnderLoadAnswersEveryRequestInFlight(t *testing.T) {
	for _, how := range []string{"Shutdown", "context"} {
		t.Run(how, func(t *testing.T) {
			release := make(chan struct{})
			started := make(chan string, 16)
			h := newHarness(t, setup{configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started }})
			serveCtx, stopServing := context.WithCancel(t.Context())
			defer stopServing()
			url, served := serveOnPort(t, serveCtx, h.srv)

			img := dogB64(t)
			const clients = 6
			var replies []<-chan string
			for i := range clients {
				replies = append(replies, asyncPredict(t.Context(), url, img, fmt.Sprintf("client-%d", i)))
			}
			<-started                        // one on the chip...
			waitQueued(t, h.chip, clients-1) // ...and the rest waiting for it

			shutdown := make(chan error, 1)
			if how == "Shutdown" {
				go func() { shutdown <- h.srv.Shutdown(context.Background()) }()
			} else {
				stopServing()
				shutdown <- nil
			}
			close(release)

			got := map[string]bool{}
			for _, r := range replies {
				got[<-r] = true
			}
			for i := range clients {
				if want := fmt.Sprintf("200 client-%d", i); !got[want] {
					t.Errorf("missing %q among %v", want, got)
				}
			}
			if err := <-shutdown; err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if err := <-served; err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if _, err := http.Get(url + "/health"); err == nil {
				t.Fatal("the server still answers after Shutdown")
			}
			if err := h.srv.Shutdown(context.Background()); err != nil {
				t.Fatalf("second Shutdown: %v", err)
			}
		})
	}
}

func TestShutdownDeadlineCutsLongRequests(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 4)
	h := newHarness(t, setup{configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started }})
	defer close(release)
	url, served := serveOnPort(t, t.Context(), h.srv)
	reply := asyncPredict(t.Context(), url, dogB64(t), "stuck")
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no time to drain
	if err := h.srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if got := <-reply; !strings.HasPrefix(got, "error:") {
		t.Fatalf("a request cut by the shutdown deadline got %q", got)
	}
}

func TestServeAfterShutdownRefuses(t *testing.T) {
	srv := newServer(t, Config{}, Options{})
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(context.Background(), ln); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown = %v, want http.ErrServerClosed", err)
	}
}

func TestStartupLandmarks(t *testing.T) {
	var b strings.Builder
	if err := StartupComplete(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != "INFO:     Application startup complete.\n" {
		t.Fatalf("%q", b.String())
	}
	b.Reset()
	if err := StartupFailed(&b, errors.New("open ttnn backend: no Blackhole device")); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "no Blackhole device") ||
		!strings.Contains(lines[1], "Application startup failed") {
		t.Fatalf("%q", b.String())
	}
}

// TestNewRefusesAnIncompleteConfig: the server states no defaults of its own (the worker's
// configuration does), so a missing setting is an error naming it, not a silent fallback.
func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	if _, err := New(Config{}, Options{}); err == nil || !strings.Contains(err.Error(), "LA_HTTP_ADDR") {
		t.Errorf("New with no address: %v, want an error naming LA_HTTP_ADDR", err)
	}
	c := testConfig(Config{})
	c.MaxPending = 0
	if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "LA_HTTP_MAX_PENDING") {
		t.Errorf("New with MaxPending 0: %v, want an error naming LA_HTTP_MAX_PENDING", err)
	}
}
