// Package browsertest drives the web console in Debian's chromium against a real worker
// (issue 26's acceptance test). It holds tests only.
package browsertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/provision"
	"github.com/locateanything/detect/worker"
)

// The browser test drives Debian's chromium (make test installs it, tools/deps.sh) against
// a real worker: embedded NATS, local storage and the bundled tiny-shapes model on the CPU.
const (
	heldoutManifest = "../../tools/tinymodel/testdata/heldout.jsonl"
	heldoutDir      = "../../tools/tinymodel/testdata"
	testBatch       = "heldout"
	testToken       = "console-test-token-6d1f"
	// heldoutJobs is how many of the held-out scenes the test submits (and every "red circle"
	// scene after them): all 96, which the bundled model answers in seconds.
	heldoutJobs = 96
)

// chromium is the browser's path. The test fails, never skips, without one: make test
// installs it, and a console nobody tested in a browser is not tested.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: the console's browser test needs it (make test installs Debian's chromium through tools/deps.sh; LA_CHROMIUM names another)")
	return ""
}

// scene is one line of the held-out manifest.
type scene struct {
	Image    string          `json:"image"`
	Query    string          `json:"query"`
	Metadata json.RawMessage `json:"metadata"`
}

// pickScenes is the first n held-out scenes plus every "red circle" one after them.
func pickScenes(t *testing.T, n int) []scene {
	t.Helper()
	f, err := os.Open(heldoutManifest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []scene
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		var s scene
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("heldout.jsonl line %d: %v", i+1, err)
		}
		if i < n || s.Query == "red circle" {
			out = append(out, s)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// consoleWorker is a running worker with its console.
type consoleWorker struct {
	base    string // http://host:port
	dataDir string
	js      jetstream.JetStream
}

// startWorker runs the worker's own wiring, configured from the environment as cmd/worker
// reads it, on the bundled model; images are read from scenes only.
func startWorker(t *testing.T, scenes string) *consoleWorker {
	t.Helper()
	dataDir := t.TempDir()
	natsAddr, httpAddr := freeport.MustAddr(t), freeport.MustAddr(t)
	weights, err := filepath.Abs(filepath.Join("..", "..", provision.BundledModel))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"LA_DATA_DIR": dataDir, "LA_NATS_LISTEN": natsAddr, "LA_FILE_ROOTS": scenes, "LA_WEIGHTS_DIR": weights,
		"LA_METRICS_ADDR": "off", "LA_HTTP_ADDR": httpAddr, "LA_POLL_WAIT": "200ms", "LA_WORKER_NAME": "w1",
		"LA_CONSOLE": "on", "LA_CONSOLE_TOKEN": testToken,
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, cfg, worker.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Open: worker.OpenEngine})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	w := &consoleWorker{base: "http://" + httpAddr, dataDir: dataDir}
	testwait.Until(t, 2*time.Minute, "the worker's /health", func() bool {
		select {
		case err := <-done:
			t.Fatalf("worker stopped: %v", err)
		default:
		}
		resp, err := http.Get(w.base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var nc *nats.Conn
	testwait.Until(t, time.Minute, "the worker's NATS server", func() bool {
		nc, err = nats.Connect("nats://" + natsAddr)
		return err == nil
	})
	t.Cleanup(nc.Close)
	if w.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the worker's jobs consumer", func() bool {
		_, err := w.js.Consumer(t.Context(), jobs.JobsStream, jobs.ConsumerName)
		return err == nil
	})
	return w
}

func (w *consoleWorker) publish(t *testing.T, job jobs.Job) {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b, jetstream.WithMsgID(job.ID)); err != nil {
		t.Fatal(err)
	}
}

// result is the stored result of id, if there is one.
func (w *consoleWorker) result(t *testing.T, id string) (jobs.Result, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dataDir, "results", id+".json"))
	if os.IsNotExist(err) {
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

// getJSON reads one of the console's API answers.
func (w *consoleWorker) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(w.base + "/console/api/" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// browser is a headless chromium tab; an exception thrown by the page fails the test.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu     sync.Mutex
	thrown []string // uncaught exceptions of the page
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs the tests as root, where chromium's sandbox refuses to start
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("lang", "en-US"),
		// chromium leaves its singleton socket's directory in TMPDIR: keep it in the test's
		chromedp.Env("TMPDIR="+t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	// the first action starts the browser, without a deadline (one would stop it)
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	console := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException {
				b.mu.Lock()
				b.thrown = append(b.thrown, m.Text)
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
		for _, e := range b.thrown {
			t.Errorf("the page threw: %s", e)
		}
	})
	return b
}

// do runs steps with a deadline, failing the test with what it was doing and what the
// page showed.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	b.t.Fatalf("%s: %v\nthe page shows:\n%s", what, err, text)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, what, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// until waits for a JavaScript expression to be true.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	b.do(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(40*time.Second)))
}

// ready waits until the page shows view with its data loaded, and cond (a JavaScript
// expression) holds, if given.
func (b *browser) ready(view, cond string) {
	b.t.Helper()
	expr := fmt.Sprintf(`(document.getElementById('main') || {dataset: {}}).dataset.view === %q && document.getElementById('main').dataset.ready === 'true'`, view)
	if cond != "" {
		expr += " && (" + cond + ")"
	}
	b.until("wait for "+view+" "+cond, expr)
}

// open loads the console at a hash route and waits for the view.
func (b *browser) open(base, route, view string) {
	b.t.Helper()
	b.do("open "+route, chromedp.Navigate(base+"/console/#/"+route))
	b.ready(view, "")
}

// texts is the text of each element matching a CSS selector.
func (b *browser) texts(sel string) []string {
	b.t.Helper()
	return eval[[]string](b, "read "+sel, fmt.Sprintf(`[...document.querySelectorAll(%q)].map((e) => e.textContent.trim())`, sel))
}

// attrs is the given attribute of each element matching a CSS selector.
func (b *browser) attrs(sel, attr string) []string {
	b.t.Helper()
	return eval[[]string](b, "read "+sel, fmt.Sprintf(`[...document.querySelectorAll(%q)].map((e) => e.getAttribute(%q))`, sel, attr))
}

func (b *browser) click(what, sel string) {
	b.t.Helper()
	b.do(what, chromedp.Click(chromedp.CSS(sel)))
}

// screenshot saves the viewport as dir/name.png when LA_CONSOLE_SCREENSHOTS names a dir
// (docs/console.md's pictures are made this way).
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("LA_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.fail("screenshot "+name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// confirm answers the confirmation dialog with yes, signing in first when the page asks.
func (b *browser) confirm() {
	b.t.Helper()
	b.until("a dialog", `document.querySelector('dialog[open]') !== null`)
	if eval[bool](b, "which dialog", `document.getElementById('signin').open`) {
		b.do("sign in",
			chromedp.SendKeys(chromedp.CSS(`[data-testid=signin-token]`), testToken),
			chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)))
		b.until("the confirmation after signing in", `document.getElementById('confirm').open`)
	}
	eval[bool](b, "clear an older answer", `document.getElementById('toast').hidden = true`)
	b.click("confirm", `[data-testid=confirm-yes]`)
	b.until("the action's answer", `!document.getElementById('toast').hidden`)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

// TestConsoleInABrowser is issue 26's acceptance run: the held-out scenes and three broken
// images through a real worker, then the console in chromium shows the overview's counts,
// the batch, a gallery filtered to "red circle" above 0.5 holding exactly the matching
// results, a picture with its boxes where the result puts them, the broken images under
// their codes; a fixed image replayed from the page succeeds and a pending job canceled
// from the page ends canceled.
func TestConsoleInABrowser(t *testing.T) {
	chromium(t) // fail first, before the worker, when there is no browser

	scenes := t.TempDir()
	if err := os.Mkdir(filepath.Join(scenes, "heldout"), 0o755); err != nil {
		t.Fatal(err)
	}
	picked := pickScenes(t, heldoutJobs)
	var ids []string
	for _, s := range picked {
		copyFile(t, filepath.Join(heldoutDir, s.Image), filepath.Join(scenes, s.Image))
	}
	// The broken images: an empty file, bytes that are no image, a file that is not there.
	broken := map[string]string{"broken-empty": "empty_image", "broken-garbage": "bad_image", "broken-missing": "not_found"}
	if err := os.WriteFile(filepath.Join(scenes, "broken-empty.png"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scenes, "broken-garbage.png"), []byte("this is not a picture, only words"), 0o644); err != nil {
		t.Fatal(err)
	}

	w := startWorker(t, scenes)
	for _, s := range picked {
		id := "scene-" + strings.TrimSuffix(filepath.Base(s.Image), ".png")
		ids = append(ids, id)
		w.publish(t, jobs.Job{ID: id, Image: "file://" + filepath.Join(scenes, s.Image), Query: s.Query, Batch: testBatch, Metadata: s.Metadata})
	}
	for id := range broken {
		w.publish(t, jobs.Job{ID: id, Image: "file://" + filepath.Join(scenes, id+".png"), Query: "red circle", Batch: testBatch})
	}
	// A dozen of the scenes again as pointing tasks, in a batch of their own: points, not boxes.
	var pointIDs []string
	for _, sc := range picked[:12] {
		id := "point-" + strings.TrimSuffix(filepath.Base(sc.Image), ".png")
		pointIDs = append(pointIDs, id)
		w.publish(t, jobs.Job{ID: id, Image: "file://" + filepath.Join(scenes, sc.Image), Query: sc.Query, Task: engine.TaskPoint, Batch: "points"})
	}
	all := append(slices.Clone(ids), "broken-empty", "broken-garbage", "broken-missing")
	results := map[string]jobs.Result{}
	testwait.Until(t, 3*time.Minute, "every job's result", func() bool {
		for _, id := range append(slices.Clone(all), pointIDs...) {
			if _, ok := results[id]; !ok {
				r, ok := w.result(t, id)
				if !ok {
					return false
				}
				results[id] = r
			}
		}
		return true
	})
	for id, code := range broken {
		if r := results[id]; r.Status != jobs.StatusFailed || r.Error == nil || r.Error.Code != code {
			t.Fatalf("broken image %s: status %s, error %+v; want failed with %s", id, r.Status, r.Error, code)
		}
	}
	// The gallery filtered to "red circle" at a score threshold must show exactly the stored
	// results with such a box. The bundled model's scores sit near 0.1-0.2 (docs/scores.md),
	// so "above 0.5" would keep nothing: the threshold is set between the red-circle scores
	// it gave, so that the filter keeps some of the label's results and drops others.
	var redScores []float64
	for _, id := range ids {
		r := results[id]
		if r.Status != jobs.StatusSucceeded {
			t.Fatalf("scene %s: %s %+v", id, r.Status, r.Error)
		}
		for _, d := range r.Detections {
			if d.Label == "red circle" {
				redScores = append(redScores, d.Score)
			}
		}
	}
	slices.Sort(redScores)
	redScores = slices.Compact(redScores)
	if len(redScores) < 2 {
		t.Fatalf("red circle scores %v: want two different ones to split", redScores)
	}
	mid := len(redScores) / 2
	threshold := strconv.FormatFloat(math.Round((redScores[mid-1]+redScores[mid])/2*1000)/1000, 'f', -1, 64)
	minScore, _ := strconv.ParseFloat(threshold, 64)
	var wantRed, anyRed []string
	for _, id := range ids {
		r := results[id]
		if slices.ContainsFunc(r.Detections, func(d engine.Detection) bool { return d.Label == "red circle" }) {
			anyRed = append(anyRed, id)
		}
		if slices.ContainsFunc(r.Detections, func(d engine.Detection) bool { return d.Label == "red circle" && d.Score >= minScore }) {
			wantRed = append(wantRed, id)
		}
	}
	if len(wantRed) == 0 || len(wantRed) == len(anyRed) {
		t.Fatalf("threshold %s keeps %v of %v: the filter would prove nothing", threshold, wantRed, anyRed)
	}

	b := newBrowser(t)

	// Overview: nothing queued, the worker alive, the three failures under their codes.
	b.open(w.base, "overview", "overview")
	b.ready("overview", `document.querySelectorAll('[data-testid=error-row]').length >= 3`)
	if got := b.texts(`[data-testid=stat-pending]`); !slices.Equal(got, []string{"0"}) {
		t.Errorf("overview: %v jobs queued, want 0", got)
	}
	if got := b.attrs(`[data-testid=worker-row]`, "data-worker"); !slices.Contains(got, "w1") {
		t.Errorf("overview: workers %v, want w1 among them", got)
	}
	for _, code := range broken {
		n := b.texts(fmt.Sprintf(`[data-testid=error-row][data-code=%q] [data-testid=error-count]`, code))
		if !slices.Equal(n, []string{"1"}) {
			t.Errorf("overview: %v errors of code %s, want 1", n, code)
		}
	}
	b.screenshot("overview")

	// Batches: the batch with its counts.
	b.open(w.base, "batches", "batches")
	row := fmt.Sprintf(`[data-testid=batch-row][data-batch=%q] `, testBatch)
	for sel, want := range map[string]int{"batch-total": len(all), "batch-succeeded": len(ids), "batch-failed": len(broken), "batch-pending": 0} {
		if got := b.texts(row + "[data-testid=" + sel + "]"); !slices.Equal(got, []string{fmt.Sprint(want)}) {
			t.Errorf("batches: %s shows %v, want %d", sel, got, want)
		}
	}
	b.screenshot("batches")

	// Gallery: every result, then live filters to "red circle" >= 0.5.
	b.click("open the batch", row+`[data-testid=batch-link]`)
	b.ready("batch", `document.querySelectorAll('[data-testid=gallery-item]').length > 0`)
	if got := b.attrs(`[data-testid=gallery-item]`, "data-id"); !sameSet(got, all) {
		t.Errorf("gallery shows %v, want all %d jobs %v", got, len(all), all)
	}
	b.until("the thumbnails", `[...document.querySelectorAll('[data-testid=gallery-item] img')].slice(0, 12).every((i) => i.complete)`)
	b.screenshot("gallery")
	if !eval[bool](b, "choose the label", `(() => { const s = document.querySelector('[data-testid=filter-label]'); s.value = 'red circle'; s.dispatchEvent(new Event('change')); return s.value === 'red circle'; })()`) {
		t.Fatalf("the label filter offers no \"red circle\": %v", b.texts(`[data-testid=filter-label] option`))
	}
	b.ready("batch", `location.hash.includes('label=red')`)
	if got := b.attrs(`[data-testid=gallery-item]`, "data-id"); !sameSet(got, anyRed) {
		t.Errorf("gallery filtered to red circle shows %v, want exactly %v", got, anyRed)
	}
	b.do("type the score", chromedp.SendKeys(chromedp.CSS(`[data-testid=filter-min-score]`), threshold))
	b.ready("batch", fmt.Sprintf(`location.hash.includes('min_score=%s') && location.hash.includes('label=red')`, threshold))
	shown := b.attrs(`[data-testid=gallery-item]`, "data-id")
	if !sameSet(shown, wantRed) {
		t.Errorf("gallery filtered to red circle >= %s shows %v, want exactly %v (from the stored results)", threshold, shown, wantRed)
	}
	var api struct {
		Total int `json:"total"`
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	w.getJSON(t, "batches/"+testBatch+"/results?label=red+circle&min_score="+threshold, &api)
	var apiIDs []string
	for _, it := range api.Items {
		apiIDs = append(apiIDs, it.ID)
	}
	if !sameSet(apiIDs, wantRed) || b.texts(`[data-testid=gallery-total]`)[0] != fmt.Sprint(api.Total) {
		t.Errorf("API answers %v (total %d), the page shows %v", apiIDs, api.Total, b.texts(`[data-testid=gallery-total]`))
	}
	b.screenshot("gallery-filtered")

	// One picture: each box where the result's bbox puts it, scaled to the picture shown.
	pick := wantRed[0]
	b.click("open a picture", fmt.Sprintf(`[data-testid=gallery-item][data-id=%q]`, pick))
	b.ready("job", `document.querySelector('[data-testid=job-picture]') && document.querySelector('[data-testid=job-picture]').complete`)
	type geometry struct {
		Img   [4]float64   `json:"img"`
		Boxes [][4]float64 `json:"boxes"`
		Label []string     `json:"labels"`
	}
	geo := eval[geometry](b, "box geometry", `(() => {
		const r = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.width, b.height]; };
		const boxes = [...document.querySelectorAll('[data-testid=box]')];
		return { img: r(document.querySelector('[data-testid=job-picture]')), boxes: boxes.map(r), labels: boxes.map((e) => e.dataset.label) };
	})()`)
	res := results[pick]
	if len(geo.Boxes) != len(res.Detections) {
		t.Fatalf("job %s: %d boxes in the page, %d detections in the result", pick, len(geo.Boxes), len(res.Detections))
	}
	sx, sy := geo.Img[2]/float64(res.Width), geo.Img[3]/float64(res.Height)
	for i, d := range res.Detections {
		want := [4]float64{geo.Img[0] + d.Box[0]*sx, geo.Img[1] + d.Box[1]*sy, (d.Box[2] - d.Box[0]) * sx, (d.Box[3] - d.Box[1]) * sy}
		for k := range want {
			if math.Abs(geo.Boxes[i][k]-want[k]) > 1.5 {
				t.Errorf("job %s box %d (%s): at %v in the page, want %v (bbox %v scaled by %.3f)", pick, i, geo.Label[i], geo.Boxes[i], want, d.Box, sx)
				break
			}
		}
		if geo.Label[i] != d.Label {
			t.Errorf("job %s box %d labeled %q, want %q", pick, i, geo.Label[i], d.Label)
		}
	}
	if sx < 1 {
		t.Errorf("the picture is shown at %.2f of its size: want it enlarged for a close look", sx)
	}
	b.screenshot("job")

	// A pointing task's answer: each point is a ring centred where the result puts it.
	pointed := ""
	for _, id := range pointIDs {
		if len(results[id].Points) > 0 {
			pointed = id
			break
		}
	}
	if pointed == "" {
		t.Fatal("no pointing task answered a point: the point check would prove nothing")
	}
	b.open(w.base, "job/"+pointed, "job")
	b.until("the picture", `document.querySelector('[data-testid=job-picture]') && document.querySelector('[data-testid=job-picture]').complete`)
	pgeo := eval[geometry](b, "point geometry", `(() => {
		const r = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.width, b.height]; };
		const pts = [...document.querySelectorAll('[data-testid=point]')];
		return { img: r(document.querySelector('[data-testid=job-picture]')), boxes: pts.map(r), labels: pts.map((e) => e.dataset.label) };
	})()`)
	pres := results[pointed]
	if len(pgeo.Boxes) != len(pres.Points) {
		t.Fatalf("job %s: %d points in the page, %d in the result", pointed, len(pgeo.Boxes), len(pres.Points))
	}
	psx, psy := pgeo.Img[2]/float64(pres.Width), pgeo.Img[3]/float64(pres.Height)
	for i, p := range pres.Points {
		cx, cy := pgeo.Boxes[i][0]+pgeo.Boxes[i][2]/2, pgeo.Boxes[i][1]+pgeo.Boxes[i][3]/2
		wx, wy := pgeo.Img[0]+p.Point[0]*psx, pgeo.Img[1]+p.Point[1]*psy
		if math.Abs(cx-wx) > 1.5 || math.Abs(cy-wy) > 1.5 {
			t.Errorf("job %s point %d: centred at (%.1f, %.1f) in the page, want (%.1f, %.1f)", pointed, i, cx, cy, wx, wy)
		}
	}

	// Failures: the three broken images under their codes; fix one, replay it from the page.
	b.open(w.base, "failures", "failures")
	for id, code := range broken {
		got := b.attrs(fmt.Sprintf(`[data-testid=failure-item][data-id=%q]`, id), "data-code")
		if !slices.Equal(got, []string{code}) {
			t.Errorf("failures: %s listed with codes %v, want [%s]", id, got, code)
		}
		if n := b.texts(fmt.Sprintf(`[data-testid=failure-group][data-code=%q][data-batch=%q] [data-testid=failure-group-count]`, code, testBatch)); !slices.Equal(n, []string{"1"}) {
			t.Errorf("failures: group %s/%s counts %v, want 1", code, testBatch, n)
		}
	}
	b.screenshot("failures")
	copyFile(t, filepath.Join(scenes, picked[0].Image), filepath.Join(scenes, "broken-empty.png"))
	b.click("select the fixed image", `[data-testid=failure-item][data-id="broken-empty"] [data-testid=failure-check]`)
	b.click("replay the selection", `[data-testid=replay-selected]`)
	b.confirm()
	if got := b.texts(`[data-testid=toast]`); len(got) != 1 || !strings.HasPrefix(got[0], "Replayed 1") {
		t.Fatalf("replay says %v, want Replayed 1", got)
	}
	if html := eval[string](b, "page source", `document.documentElement.outerHTML`); strings.Contains(html, testToken) {
		t.Error("the console token is in the page after signing in")
	}
	b.open(w.base, "job/broken-empty", "job")
	testwait.Until(t, time.Minute, "the replayed job to succeed in the page", func() bool {
		b.do("reload the job", chromedp.Reload())
		b.ready("job", "")
		return slices.Equal(b.texts(`[data-testid=job-status]`), []string{"succeeded"})
	})

	// Cancel: with the jobs consumer paused a job published now stays pending; the batches
	// page offers to cancel its batch's pending jobs.
	if _, err := w.js.PauseConsumer(t.Context(), jobs.JobsStream, jobs.ConsumerName, time.Now().Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	w.publish(t, jobs.Job{ID: "to-cancel", Image: "file://" + filepath.Join(scenes, picked[0].Image), Query: "red circle", Batch: "later"})
	// Its page, before any worker has picked it up: queued, in its batch, with its place in LA_JOBS.
	b.open(w.base, "job/to-cancel", "job")
	if st, batch, q := b.texts(`[data-testid=job-status]`), b.texts(`[data-testid=job-batch]`), b.texts(`[data-testid=job-queued]`); !slices.Equal(st, []string{"queued"}) ||
		!slices.Equal(batch, []string{"later"}) || len(q) != 1 || !strings.Contains(q[0], "la.jobs.default") {
		t.Errorf("the page of a queued job: status %v, batch %v, queue %v; want queued in batch later, on la.jobs.default", st, batch, q)
	}
	later := `[data-testid=batch-row][data-batch="later"] `
	b.open(w.base, "batches", "batches")
	b.ready("batches", `document.querySelector('`+later+`[data-testid=batch-cancel]') !== null`)
	if got := b.texts(later + "[data-testid=batch-pending]"); !slices.Equal(got, []string{"1"}) {
		t.Errorf("batch later shows %v pending, want 1", got)
	}
	// The confirmation comes first, its focus on the safe answer; Escape leaves the job be.
	b.click("ask to cancel the batch's pending jobs", later+"[data-testid=batch-cancel]")
	b.until("the confirmation", `document.getElementById('confirm').open`)
	if focus := eval[string](b, "focus", `document.activeElement.dataset.testid || document.activeElement.tagName`); focus != "confirm-no" {
		t.Errorf("the confirmation opens with the focus on %s, want confirm-no (the safe answer)", focus)
	}
	b.do("press Escape", chromedp.KeyEvent(kb.Escape))
	b.until("the confirmation to close", `!document.getElementById('confirm').open`)
	var queued struct {
		Batches []struct {
			Batch    string `json:"batch"`
			Pending  int    `json:"pending"`
			Canceled int    `json:"canceled"`
		} `json:"batches"`
	}
	w.getJSON(t, "batches", &queued)
	for _, bt := range queued.Batches {
		if bt.Batch == "later" && (bt.Pending != 1 || bt.Canceled != 0) {
			t.Fatalf("after Escape, batch later has %d pending and %d canceled; want it untouched", bt.Pending, bt.Canceled)
		}
	}
	b.click("cancel the batch's pending jobs", later+"[data-testid=batch-cancel]")
	b.confirm()
	if got := b.texts(`[data-testid=toast]`); len(got) != 1 || !strings.HasPrefix(got[0], "Canceled 1") {
		t.Fatalf("cancel says %v, want Canceled 1", got)
	}
	if _, err := w.js.ResumeConsumer(t.Context(), jobs.JobsStream, jobs.ConsumerName); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the canceled job's result", func() bool {
		r, ok := w.result(t, "to-cancel")
		return ok && r.Status == jobs.StatusCanceled
	})
	b.open(w.base, "job/to-cancel", "job")
	testwait.Until(t, 30*time.Second, "the page to show the job canceled", func() bool {
		b.do("reload the job", chromedp.Reload())
		b.ready("job", "")
		return slices.Equal(b.texts(`[data-testid=job-status]`), []string{"canceled"})
	})
}
