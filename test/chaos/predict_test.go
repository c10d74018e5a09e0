//go:build linux

package chaos

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locateanything/detect/internal/freeport"
)

// TestPredictAbuse: /predict (loopback only) under bad bodies, a 200 MB body (with and
// without Content-Length), slow bodies and slow headers, and 50 concurrent clients, while
// queued jobs keep flowing through the same chip. Every bad request gets a JSON 4xx, the
// oversized ones are cut at LA_HTTP_MAX_BODY_BYTES (64 MiB) without the worker's memory
// following, slow clients are dropped after LA_HTTP_READ_TIMEOUT / LA_HTTP_READ_HEADER_TIMEOUT
// while others are served, every concurrent client gets 200 (or 503 with Retry-After),
// the worker stays up and every queued job is accounted for. Bounded: 4 slow clients, 50
// clients x 1 request; full: 20 slow clients, 50 clients x 6 requests.
func TestPredictAbuse(t *testing.T) {
	s := newScene(t)
	natsAddr, httpAddr := freeport.MustAddr(t), freeport.MustAddr(t)
	w := s.worker("w1", map[string]string{"LA_NATS_LISTEN": natsAddr, "LA_HTTP_ADDR": httpAddr,
		"LA_HTTP_READ_TIMEOUT": "3s", "LA_HTTP_READ_HEADER_TIMEOUT": "2s"})
	w.start(t)
	s.connect("nats://" + natsAddr)
	base := "http://" + httpAddr
	published := make(chan error, 1)
	go func() { published <- s.publishGood("pq", 0, size.jobs) }() // queued jobs meanwhile

	png, err := os.ReadFile(filepath.Join(s.images, "00.png"))
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(png)
	rss0, _ := w.proc.rssKB()

	t.Run("bad_bodies", func(t *testing.T) { predictBadBodies(t, base, b64) })
	t.Run("oversized_body", func(t *testing.T) {
		for _, chunked := range []bool{false, true} {
			predictOversized(t, base, size.bigBody, chunked)
			if rss, err := w.proc.rssKB(); err == nil && rss > 1<<20 {
				t.Errorf("worker RSS %d MiB after a %d MiB body (chunked %v)", rss>>10, size.bigBody>>20, chunked)
			}
		}
	})
	t.Run("slow_clients", func(t *testing.T) { predictSlowClients(t, httpAddr, base, b64) })
	t.Run("concurrent_clients", func(t *testing.T) { predictConcurrent(t, base, b64, 50, size.predictN) })

	if err := <-published; err != nil {
		t.Fatal(err)
	}
	s.account(3 * time.Minute)
	rss1, _ := w.proc.rssKB()
	t.Logf("worker RSS %d MiB before the abuse, %d MiB after", rss0>>10, rss1>>10)
	if code, body := predict(t, base, fmt.Sprintf(`{"image":%q,"query":"red circle","max_new_tokens":8}`, b64)); code != 200 {
		t.Errorf("/predict after the abuse: %d %s", code, body)
	}
	w.checkLog(t)
}

// predict posts body to /predict and returns the status and body.
func predict(t testing.TB, base, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(base+"/predict", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("/predict: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func predictBadBodies(t *testing.T, base, b64 string) {
	img := func(rest string) string { return `{"image":"` + b64 + `"` + rest + `}` }
	bomb := base64.StdEncoding.EncodeToString(rgbPNG(1_000_000, 1_000_000, zeroRows(1, 1)))
	cases := map[string]string{
		"empty":            ``,
		"not-json":         `this is not json`,
		"array":            `[]`,
		"null":             `null`,
		"truncated":        `{"image": "` + b64[:20],
		"image-number":     `{"image": 5, "query": "x"}`,
		"no-image":         `{"query": "x"}`,
		"no-query":         img(``),
		"bad-base64":       `{"image": "!!!not base64!!!", "query": "x"}`,
		"not-an-image":     `{"image": "` + base64.StdEncoding.EncodeToString([]byte("hello")) + `", "query": "x"}`,
		"bomb":             `{"image": "` + bomb + `", "query": "x"}`,
		"empty-query":      img(`,"query":""`),
		"query-100k":       img(`,"query":"` + strings.Repeat("a", 100_000) + `"`),
		"budget-negative":  img(`,"query":"x","max_new_tokens":-1`),
		"budget-billion":   img(`,"query":"x","max_new_tokens":1000000000`),
		"budget-overflow":  img(`,"query":"x","max_new_tokens":1e30`),
		"budget-fraction":  img(`,"query":"x","max_new_tokens":1.5`),
		"task-unknown":     img(`,"query":"x","task":"nuke"`),
		"overlay-not-bool": img(`,"query":"x","return_overlay":{"a":1}`),
		"deep":             `{"image":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `,"query":"x"}`,
		"bad-utf8":         "{\"image\": \"\xff\xfe\", \"query\": \"x\"}",
	}
	for name, body := range cases {
		code, resp := predict(t, base, body)
		var detail struct {
			Detail any `json:"detail"`
		}
		if code < 400 || code >= 500 || json.Unmarshal([]byte(resp), &detail) != nil || detail.Detail == nil {
			t.Errorf("%s: %d %.200s; want a 4xx with a JSON detail", name, code, resp)
		}
	}
	for _, c := range []struct{ method, path string }{{"GET", "/predict"}, {"POST", "/predict/"}, {"DELETE", "/health"}} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 405 {
			t.Errorf("%s %s: %d", c.method, c.path, resp.StatusCode)
		}
	}
	checkHealth(t, base)
}

// bodyReader is n bytes of a /predict body whose image never ends, made as it is read
// (fast, so the client keeps up with the server under the race detector too).
type bodyReader struct {
	n, off int64
}

var filler = bytes.Repeat([]byte("A"), 64<<10)

func (b *bodyReader) Read(p []byte) (int, error) {
	const head = `{"query":"x","image":"`
	if b.off >= b.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), b.n-b.off)]
	var i int
	if b.off < int64(len(head)) {
		i = copy(p, head[b.off:])
	}
	for i < len(p) {
		i += copy(p[i:], filler)
	}
	b.off += int64(i)
	return i, nil
}

// predictOversized sends an n-byte body; the server must answer 413, or close the
// connection while it is still being sent, and keep serving.
func predictOversized(t *testing.T, base string, n int64, chunked bool) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/predict", &bodyReader{n: n})
	if err != nil {
		t.Fatal(err)
	}
	if !chunked {
		req.ContentLength = n
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case err != nil:
		var ne *net.OpError
		if !errors.As(err, &ne) && !strings.Contains(err.Error(), "connection reset") && !strings.Contains(err.Error(), "broken pipe") {
			t.Errorf("%d MiB body (chunked %v): %v; want 413 or the connection closed", n>>20, chunked, err)
		}
		t.Logf("%d MiB body (chunked %v): connection closed after %s (%v)", n>>20, chunked, took, err)
	default:
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%d MiB body (chunked %v): %d after %s: %.200s", n>>20, chunked, resp.StatusCode, took, b)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%d MiB body: %d, want 413", n>>20, resp.StatusCode)
		}
	}
	checkHealth(t, base)
}

// predictSlowClients opens slow-body and slow-header connections: each must be dropped
// after the read timeouts (3 s, 2 s here), and a normal request made meanwhile must be
// answered.
func predictSlowClients(t *testing.T, addr, base, b64 string) {
	t.Helper()
	type outcome struct {
		kind string
		took time.Duration
		err  error
	}
	results := make(chan outcome, 2*size.slowConns)
	for i := range 2 * size.slowConns {
		kind := []string{"slow body", "slow headers"}[i%2]
		go func() {
			took, err := slowClient(addr, kind == "slow headers")
			results <- outcome{kind, took, err}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the slow ones are connected
	start := time.Now()
	code, body := predict(t, base, fmt.Sprintf(`{"image":%q,"query":"red circle","max_new_tokens":8}`, b64))
	if code != 200 {
		t.Errorf("/predict beside %d slow clients: %d %.200s", 2*size.slowConns, code, body)
	}
	t.Logf("/predict beside %d slow clients: %d in %s", 2*size.slowConns, code, time.Since(start).Round(time.Millisecond))
	var longest time.Duration
	for range 2 * size.slowConns {
		o := <-results
		if o.err != nil {
			t.Errorf("%s client: %v", o.kind, o.err)
		}
		longest = max(longest, o.took)
	}
	t.Logf("slow clients dropped after at most %s", longest.Round(time.Millisecond))
}

// slowClient trickles a request (its headers or its body) one byte every 200 ms and
// returns how long the server let it do that before answering or closing.
func slowClient(addr string, headers bool) (time.Duration, error) {
	const limit = 20 * time.Second // far over the read timeouts: a server that never drops it
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	head := "POST /predict HTTP/1.1\r\nHost: chaos\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	trickle := `{"query":"x","image":"` + strings.Repeat("A", 200)
	if headers {
		head, trickle = "POST /predict HTTP/1.1\r\n", strings.Repeat("X-Slow: y\r\n", 20)
	}
	if _, err := conn.Write([]byte(head)); err != nil {
		return 0, err
	}
	closed := make(chan struct{})
	go func() { // an answer, or the close, ends it
		_, _ = conn.Read(make([]byte, 1))
		close(closed)
	}()
	for i := 0; time.Since(start) < limit; i++ {
		select {
		case <-closed:
			return time.Since(start), nil
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := conn.Write([]byte{trickle[i%len(trickle)]}); err != nil {
			return time.Since(start), nil
		}
	}
	return limit, fmt.Errorf("still connected after %s of trickling", limit)
}

// predictConcurrent runs clients goroutines of n requests each; every answer must be 200
// with the contract's fields, or 503 with Retry-After.
func predictConcurrent(t *testing.T, base, b64 string, clients, n int) {
	t.Helper()
	body := fmt.Sprintf(`{"image":%q,"query":"red circle</c>blue square","max_new_tokens":8}`, b64)
	var mu sync.Mutex
	counts := map[int]int{}
	var errs []string
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for range n {
				resp, err := http.Post(base+"/predict", "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var pr struct {
					Detections []json.RawMessage `json:"detections"`
				}
				bad := ""
				switch {
				case resp.StatusCode == 200 && (json.Unmarshal(b, &pr) != nil || pr.Detections == nil):
					bad = fmt.Sprintf("200 without the contract's fields: %.200s", b)
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "":
					bad = "503 without Retry-After"
				case resp.StatusCode != 200 && resp.StatusCode != 503:
					bad = fmt.Sprintf("%d %.200s", resp.StatusCode, b)
				}
				mu.Lock()
				counts[resp.StatusCode]++
				if bad != "" {
					errs = append(errs, bad)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d clients x %d requests in %s: %v", clients, n, time.Since(start).Round(time.Millisecond), counts)
	for _, e := range errs[:min(len(errs), 10)] {
		t.Errorf("concurrent client: %s", e)
	}
	if counts[200] == 0 {
		t.Error("no concurrent request was answered 200")
	}
}

func checkHealth(t testing.TB, base string) {
	t.Helper()
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatalf("/health: %v", err)
	}
	defer resp.Body.Close()
	var h struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.Status != "ok" {
		t.Fatalf("/health: %v %q", err, h.Status)
	}
}
