package httpcompat

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
)

// slowUpload is a raw TCP client that sends a /predict's headers at once, then its body
// slowly: a phone on a bad link, or someone holding connections open.
type slowUpload struct {
	conn net.Conn
	done chan struct{}
}

// startSlowUpload sends headers announcing a body of size bytes and the first burst bytes
// of it, then one more byte every pace (never, for pace 0) until the server answers or cuts
// the connection, or the test ends.
func startSlowUpload(t *testing.T, url string, size, burst int, pace time.Duration) *slowUpload {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	u := &slowUpload{conn: conn, done: make(chan struct{})}
	t.Cleanup(func() { conn.Close(); <-u.done })
	body := strings.Repeat(" ", size)
	fmt.Fprintf(conn, "POST /predict HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		size, body[:burst])
	go func() {
		defer close(u.done)
		if pace == 0 {
			return
		}
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := burst; i < size; i++ {
			<-tick.C
			if _, err := io.WriteString(conn, body[i:i+1]); err != nil {
				return // the server has cut it
			}
		}
	}()
	return u
}

// response reads the server's answer to the upload.
func (u *slowUpload) response(t *testing.T) (*http.Response, []byte) {
	t.Helper()
	u.conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(u.conn), nil)
	if err != nil {
		t.Fatalf("slow upload: no answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("slow upload: reading the answer: %v", err)
	}
	return resp, b
}

// TestSlowUploadsDoNotStarvePredict: clients trickling their bodies hold upload slots, not
// the slots of requests waiting for the chip, so a normal client is still served at once.
// (Before, 64 clients sending a byte now and then held every LA_HTTP_MAX_PENDING slot for
// LA_HTTP_READ_TIMEOUT and everyone else got 503.)
func TestSlowUploadsDoNotStarvePredict(t *testing.T) {
	const maxPending, slow = 4, 12
	h := newHarness(t, setup{cfg: Config{MaxPending: maxPending}})
	url, _ := serveOnPort(t, t.Context(), h.srv) // the worker's http.Server, ReadTimeout and all
	for range slow {
		startSlowUpload(t, url, 1<<20, 1, 100*time.Millisecond)
	}
	testwait.Until(t, time.Minute, "the slow uploads to be in the server",
		func() bool { return h.srv.uploading.Load() == slow })
	if n := h.srv.pending.Load(); n != 0 {
		t.Fatalf("%d slow uploads count as pending for the chip", n)
	}
	img := dogB64(t)
	for i := range maxPending + 1 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		status, body := postPredict(t, ctx, url, map[string]any{"image": img, "query": fmt.Sprintf("dog-%d", i)})
		cancel()
		if status != http.StatusOK {
			t.Fatalf("request %d with %d slow uploads in the server: %d %s", i, slow, status, body)
		}
	}
	if n := h.srv.uploading.Load(); n != slow {
		t.Fatalf("%d slow uploads still in the server, want %d: the test checked nothing", n, slow)
	}
}

// TestSlowAndStalledUploadsAreCutWith408: a body under LA_HTTP_MIN_BODY_RATE once
// LA_HTTP_BODY_TIMEOUT has passed, or one that pauses for LA_HTTP_BODY_TIMEOUT, is answered
// 408 with the contract's {"detail": ...} and the connection is closed, long before
// LA_HTTP_READ_TIMEOUT; its upload slot is free again.
func TestSlowAndStalledUploadsAreCutWith408(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{BodyTimeout: 300 * time.Millisecond, MinBodyRate: 1000}})
	url, _ := serveOnPort(t, t.Context(), h.srv)
	for _, c := range []struct {
		name  string
		burst int           // bytes sent with the headers
		pace  time.Duration // then one byte per pace
		want  string
	}{
		{"trickling", 1, 20 * time.Millisecond, "LA_HTTP_MIN_BODY_RATE"}, // 50 bytes/s
		{"stalled", 100, 0, "LA_HTTP_BODY_TIMEOUT"},                      // fast, then nothing
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			u := startSlowUpload(t, url, 1<<20, c.burst, c.pace)
			resp, body := u.response(t)
			took := time.Since(start)
			if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
				t.Fatalf("status %d (close %v) %s, want 408 and the connection closed", resp.StatusCode, resp.Close, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if d := detailString(t, body); !strings.Contains(d, c.want) {
				t.Errorf("detail %q does not name %s", d, c.want)
			}
			if took > 30*time.Second {
				t.Errorf("cut after %v: the body limits did not apply, LA_HTTP_READ_TIMEOUT did", took)
			}
			testwait.Until(t, time.Minute, "the upload slot to be free", func() bool { return h.srv.uploading.Load() == 0 })
		})
	}
}

// TestUploadsBeyondMaxUploadingAre503: the requests still sending their body are bounded too.
func TestUploadsBeyondMaxUploadingAre503(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{MaxUploading: 2}})
	for range 2 {
		startSlowUpload(t, h.url, 1<<20, 10, 0)
	}
	testwait.Until(t, time.Minute, "two stalled uploads in the server", func() bool { return h.srv.uploading.Load() == 2 })
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "third"})
	if status != http.StatusServiceUnavailable || !strings.Contains(detailString(t, body), "LA_HTTP_MAX_UPLOADING") {
		t.Fatalf("third upload: %d %s, want 503 naming LA_HTTP_MAX_UPLOADING", status, body)
	}
}

// TestBodyLimitsEndWithTheBody: once the body is in, the read deadlines are gone: a request
// that waits for the chip far longer than LA_HTTP_BODY_TIMEOUT is answered, and one whose
// client goes away while it waits is still noticed (net/http's background read, which
// notices it, must not time out).
func TestBodyLimitsEndWithTheBody(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	release := make(chan struct{})
	started := make(chan string, 4)
	gone := &messageSignal{msg: "predict: client went away", seen: make(chan struct{}, 1)}
	h := newHarness(t, setup{
		cfg:       Config{BodyTimeout: bodyTimeout, MinBodyRate: 1},
		opts:      Options{Logger: slog.New(gone)},
		configure: func(e *enginetest.Engine) { e.Release, e.Started = release, started },
	})
	url, _ := serveOnPort(t, t.Context(), h.srv)
	img := dogB64(t)
	patient := asyncPredict(t.Context(), url, img, "patient")
	<-started
	ctx, hangUp := context.WithCancel(t.Context())
	leaving := asyncPredict(ctx, url, img, "leaving")
	waitQueued(t, h.chip, 1)
	time.Sleep(5 * bodyTimeout) // what is tested: time passing after the bodies are in
	hangUp()
	<-gone.seen
	if got := <-leaving; !strings.HasPrefix(got, "error:") {
		t.Fatalf("the client hung up, yet got %q", got)
	}
	close(release)
	if got := <-patient; got != "200 patient" {
		t.Fatalf("a request that waited on the chip past LA_HTTP_BODY_TIMEOUT got %q", got)
	}
}
