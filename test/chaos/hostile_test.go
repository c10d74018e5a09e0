//go:build linux

package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/jobs"
)

// hostile is one job of the catalogue: the message bytes, its Nats-Msg-Id, and the
// outcome the wire contract promises for it. The worker keys a job by its own id when
// valid, else by its Nats-Msg-Id when valid, else by seq=<stream sequence>.
type hostile struct {
	name   string // also the Nats-Msg-Id, unless msgID is set
	msgID  string // "-" publishes without a Nats-Msg-Id
	body   []byte
	output string // the job's output prefix, when it names one the worker must refuse
	want   want
}

// TestHostileJobs publishes the hostile-job catalogue to a worker on the single-machine
// default (embedded NATS, no LA_FILE_ROOTS: it may read below its working directory and
// LA_DATA_DIR, and write below LA_DATA_DIR): bad JSON, subject-hostile ids, 100 KB
// queries, absurd budgets, unknown tasks, past deadlines, decompression bombs, truncated
// and fake images, FIFOs and devices, /etc and /proc, outputs outside the roots, huge
// metadata. Every job must end with the failure code the wire contract gives it (or
// succeed where the input is odd but legal), a failed one with a dead-letter record, the
// worker must neither crash nor restart, nothing may be written outside LA_DATA_DIR, no
// result may quote a file it refused, and a good job after the catalogue must still run.
// Both forms run the whole catalogue.
func TestHostileJobs(t *testing.T) {
	s := newScene(t)
	addr := freeport.MustAddr(t)
	w := s.worker("w1", map[string]string{"LA_NATS_LISTEN": addr,
		"LA_FILE_ROOTS": unset, "LA_OUTPUT_ROOTS": unset, "LA_RESULTS_URL": unset})
	data := w.env["LA_DATA_DIR"]
	s.results = "file://" + filepath.Join(data, "results") + "/"
	images := mkdir(t, w.dir, "images") // below the working directory: readable
	outside := mkdir(t, s.dir, "outside")
	catalogue := hostileCatalogue(t, images, data, outside, w.dir)
	w.start(t)
	s.connect("nats://" + addr)
	rss0, _ := w.proc.rssKB()

	for _, h := range catalogue {
		msgID := h.msgID
		switch msgID {
		case "":
			msgID = h.name
		case "-":
			msgID = ""
		}
		out := h.output
		if out == "" {
			out = s.results
		}
		if err := s.led.submit(s.c, h.body, msgID, "", out, h.want); err != nil {
			t.Fatalf("%s: %v", h.name, err)
		}
	}
	good := jobs.Job{ID: "good-after", Image: "file://" + filepath.Join(images, "00.png"), Query: "red circle"}
	if err := s.led.submitJob(s.c, good, s.results, succeeded); err != nil {
		t.Fatal(err)
	}

	r := s.account(3 * time.Minute)
	for _, h := range catalogue {
		if h.want == (want{}) {
			t.Logf("odd but legal: %-22s -> %s", h.name, r.Outcomes[h.name])
		}
	}
	if w.starts != 1 || !w.proc.alive() {
		t.Errorf("the worker did not survive the catalogue")
	}
	rss1, _ := w.proc.rssKB()
	t.Logf("%d hostile jobs; worker RSS %d MiB before, %d MiB after", len(catalogue), rss0>>10, rss1>>10)
	if rss1 > 2<<20 {
		t.Errorf("worker RSS %d MiB after the catalogue", rss1>>10)
	}
	w.checkLog(t)

	// Nothing written outside LA_DATA_DIR, nothing quoted from a refused file.
	for _, dir := range []string{"/etc", "/proc/self", outside, w.dir} {
		for _, h := range catalogue {
			if _, err := os.Lstat(filepath.Join(dir, h.name+".json")); err == nil {
				t.Errorf("job %s wrote %s", h.name, filepath.Join(dir, h.name+".json"))
			}
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		t.Errorf("something was written to %s: %v", outside, entries)
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	firstLine, _, _ := strings.Cut(string(passwd), "\n")
	ctx := t.Context()
	for _, stream := range []string{jobs.ResultsStream, jobs.DLQStream} {
		msgs, err := readStream(ctx, s.c, stream)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			for _, secret := range []string{firstLine, "LA_WEIGHTS_DIR=", "PATH=/"} {
				if secret != "" && strings.Contains(string(m.data), secret) {
					t.Errorf("%s message %s quotes %q", stream, m.subject, secret)
				}
			}
		}
	}
}

// hostileCatalogue builds the catalogue, with the files it needs under images (readable
// by the worker), data (its LA_DATA_DIR) and outside (neither).
func hostileCatalogue(t *testing.T, images, data, outside, workDir string) []hostile {
	t.Helper()
	put := func(name string, b []byte) string {
		path := filepath.Join(images, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "file://" + path
	}
	scene, err := os.ReadFile(filepath.Join(heldoutPNG, "00.png"))
	if err != nil {
		t.Fatal(err)
	}
	photo, err := os.ReadFile(photoJPG)
	if err != nil {
		t.Fatal(err)
	}
	goodImage := put("00.png", scene)

	// job is a well-formed job with fields changed (nil deletes one).
	job := func(id string, change map[string]any) []byte {
		m := map[string]any{"id": id, "image": goodImage, "query": "red circle"}
		for k, v := range change {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	failed := func(code string) want { return want{status: jobs.StatusFailed, code: code} }
	invalid := failed(jobs.CodeInvalidJob)
	badURL := failed(jobs.CodeBadURL)
	anyEnd := want{} // odd but legal: any terminal outcome, no crash
	var cs []hostile
	add := func(name string, body []byte, w want) { cs = append(cs, hostile{name: name, body: body, want: w}) }

	// Bad JSON: the worker keys these by their Nats-Msg-Id.
	add("json-not-json", []byte("this is not json"), invalid)
	add("json-empty", nil, invalid)
	add("json-array", []byte("[1,2,3]"), invalid)
	add("json-null", []byte("null"), invalid)
	add("json-trailing", append(job("json-trailing", nil), []byte(` {"id":"other"}`)...), invalid)
	add("json-unknown-field", job("json-unknown-field", map[string]any{"priority": 9}), invalid)
	add("json-wrong-type", job("json-wrong-type", map[string]any{"query": 42}), invalid)
	add("json-binary", []byte{0xff, 0xfe, 0x00, 0x01, 0x80, '{', 0xc3, 0x28}, invalid)
	deep := `{"id":"json-deep","image":"` + goodImage + `","query":"x","metadata":{"a":` +
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}}"
	add("json-deep", []byte(deep), invalid)
	add("json-version", job("json-version", map[string]any{"v": 2}), invalid)
	add("json-no-image", job("json-no-image", map[string]any{"image": nil}), invalid)
	add("json-bad-deadline", job("json-bad-deadline", map[string]any{"deadline": "yesterday"}), invalid)
	add("json-bad-utf8", []byte(`{"id":"json-bad-utf8","image":"`+goodImage+"\",\"query\":\"red \xff\xfe circle\"}"), anyEnd)

	// Subject-hostile ids: not usable as subject tokens or keys. A valid Nats-Msg-Id keys
	// the job; otherwise its stream sequence does (seq=<n>).
	for i, id := range []string{"a.b", "la.jobs.>", "*", " spaced id ", "../../etc/passwd", "ünïcödé",
		strings.Repeat("x", 129), "$JS.API.STREAM.DELETE.LA_JOBS", "cancel.good-after"} {
		cs = append(cs, hostile{name: fmt.Sprintf("id-hostile-%d", i), msgID: id, body: job(id, nil), want: invalid})
	}
	cs = append(cs,
		hostile{name: "id-empty", msgID: "-", body: job("", nil), want: invalid},
		hostile{name: "id-newline", body: job("a\nb", nil), want: invalid},
		hostile{name: "id-number", body: []byte(`{"id":12345,"image":"` + goodImage + `","query":"x"}`), want: invalid},
		hostile{name: "id-hostile-batch", body: job("id-hostile-batch", map[string]any{"batch": "a.b.>"}), want: invalid},
	)

	// Queries.
	add("query-100k", job("query-100k", map[string]any{"query": strings.Repeat("red circle ", 100_000/11)}), invalid)
	add("query-1000-emoji", job("query-1000-emoji", map[string]any{"query": strings.Repeat("🦀", engine.MaxQueryChars)}), anyEnd)
	add("query-separators", job("query-separators", map[string]any{"query": strings.Repeat("</c>", engine.MaxQueryChars/4)}), anyEnd)
	add("query-nul", job("query-nul", map[string]any{"query": "red\x00circle"}), anyEnd)
	add("query-blank", job("query-blank", map[string]any{"query": "   "}), failed(""))

	// Budgets.
	add("budget-negative", job("budget-negative", map[string]any{"max_new_tokens": -1}), failed(engine.CodeBadBudget))
	add("budget-zero", job("budget-zero", map[string]any{"max_new_tokens": 0}), failed(engine.CodeBadBudget))
	add("budget-billion", job("budget-billion", map[string]any{"max_new_tokens": 1_000_000_000}), failed(engine.CodeBadBudget))
	add("budget-overflow", []byte(`{"id":"budget-overflow","image":"`+goodImage+`","query":"x","max_new_tokens":1e30}`), failed(engine.CodeBadBudget))
	add("budget-fraction", job("budget-fraction", map[string]any{"max_new_tokens": 1.5}), invalid)
	add("budget-string", job("budget-string", map[string]any{"max_new_tokens": "64"}), invalid)
	add("budget-cap", job("budget-cap", map[string]any{"max_new_tokens": 1024}), succeeded)

	// Tasks.
	add("task-unknown", job("task-unknown", map[string]any{"task": "nuke"}), invalid)
	add("task-injection", job("task-injection", map[string]any{"task": `detect"},{"task":"text`}), invalid)
	add("task-text", job("task-text", map[string]any{"task": "text"}), anyEnd)

	// Deadlines.
	expired := want{status: jobs.StatusExpired, code: jobs.CodeDeadline}
	add("deadline-past", job("deadline-past", map[string]any{"deadline": "2000-01-01T00:00:00Z"}), expired)
	add("deadline-epoch", job("deadline-epoch", map[string]any{"deadline": "1970-01-01T00:00:00Z"}), expired)
	add("deadline-far", job("deadline-far", map[string]any{"deadline": "9999-12-31T23:59:59Z"}), succeeded)

	// Images: bombs, lies about their size, truncated and fake ones.
	tooLarge := failed(engine.CodeImageTooLarge)
	badImage := failed(engine.CodeBadImage)
	imageJob := func(name string, b []byte, w want) { add(name, job(name, map[string]any{"image": put(name, b)}), w) }
	imageJob("img-declares-1e12-px", rgbPNG(1_000_000, 1_000_000, zeroRows(1, 1)), tooLarge)
	imageJob("img-bomb-64mp", rgbPNG(8000, 8000, zeroRows(8000, 8000)), tooLarge)
	imageJob("img-bomb-36mp", rgbPNG(6000, 6000, zeroRows(6000, 6000)), anyEnd) // under the 40 MP budget
	imageJob("img-jpeg-declares-4g-px", hugeJPEG(t, 65000), tooLarge)
	imageJob("img-gif-declares-4g-px", hugeGIF(), failed(""))
	imageJob("img-png-truncated", scene[:len(scene)/2], badImage)
	imageJob("img-jpeg-truncated", photo[:len(photo)*6/10], anyEnd) // a decoder may show what arrived
	imageJob("img-text", []byte("hello, I am not an image"), badImage)
	imageJob("img-html", []byte("<html><body>not an image</body></html>"), badImage)
	imageJob("img-svg", []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`), badImage)
	imageJob("img-empty", nil, failed(jobs.CodeEmptyImage))
	imageJob("img-png-signature-only", []byte("\x89PNG\r\n\x1a\n"), badImage)
	imageJob("img-png-0x0", rgbPNG(0, 0, zeroRows(0, 0)), badImage)
	imageJob("img-png-tiny-valid", smallPNG(t, 1, 1), anyEnd)
	overBytes := filepath.Join(images, "img-over-byte-limit.png")
	if f, err := os.Create(overBytes); err != nil {
		t.Fatal(err)
	} else {
		_ = f.Truncate(40 << 20) // sparse: 40 MiB of zeros, over LA_MAX_IMAGE_BYTES (32 MiB)
		f.Close()
	}
	add("img-over-byte-limit", job("img-over-byte-limit", map[string]any{"image": "file://" + overBytes}), tooLarge)

	// Paths: special files, denied folders, links out, malformed URLs.
	fifo := filepath.Join(images, "fifo.png")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link-zero.png": "/dev/zero", "link-passwd.png": "/etc/passwd"} {
		if err := os.Symlink(target, filepath.Join(images, name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, url := range map[string]string{
		"path-fifo":         "file://" + fifo,
		"path-dev-zero":     "file:///dev/zero",
		"path-dev-urandom":  "file:///dev/urandom",
		"path-link-zero":    "file://" + filepath.Join(images, "link-zero.png"),
		"path-link-passwd":  "file://" + filepath.Join(images, "link-passwd.png"),
		"path-etc-passwd":   "file:///etc/passwd",
		"path-etc-shadow":   "file:///etc/shadow",
		"path-proc-environ": "file:///proc/self/environ",
		"path-proc-mem":     "file:///proc/self/mem",
		"path-outside":      "file://" + filepath.Join(outside, "x.png"),
		"path-dotdot":       "file://" + images + "/../../../../../etc/passwd",
		"path-host":         "file://localhost/etc/passwd",
		"path-relative":     "images/00.png",
		"path-gs":           "gs://bucket/key.png",
		"path-s3-off":       "s3://bucket/key.png",
		"path-http":         "http://127.0.0.1:1/x.png",
		"path-too-long":     "file://" + images + "/" + strings.Repeat("a", 5000),
		"path-nul":          "file://" + images + "/00.png\x00.jpg",
	} {
		add(name, job(name, map[string]any{"image": url}), badURL)
	}
	add("path-folder", job("path-folder", map[string]any{"image": "file://" + images}), failed(jobs.CodeNotFound))
	add("path-missing", job("path-missing", map[string]any{"image": "file://" + images + "/missing.png"}), failed(jobs.CodeNotFound))

	// Outputs the worker must refuse: published and dead-lettered, never stored.
	fifoOut := mkdir(t, data, "fifo-out")
	if err := syscall.Mkfifo(filepath.Join(fifoOut, "out-fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "a-file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{
		"out-etc":          "file:///etc/",
		"out-proc":         "file:///proc/self/",
		"out-outside":      "file://" + outside + "/",
		"out-workdir":      "file://" + workDir + "/", // readable, not writable
		"out-dotdot":       "file://" + data + "/../../outside/",
		"out-relative":     "results/",
		"out-gs":           "gs://bucket/prefix/",
		"out-fifo":         "file://" + fifoOut + "/",
		"out-through-file": "file://" + filepath.Join(data, "a-file") + "/",
	} {
		cs = append(cs, hostile{name: name, body: job(name, map[string]any{"output": out}), output: out,
			want: want{status: jobs.StatusFailed, code: jobs.CodeBadURL, unstored: true}})
	}

	// Metadata: echoed back in the result, so a big one makes a big result.
	add("meta-500k", job("meta-500k", map[string]any{"metadata": map[string]string{"note": strings.Repeat("m", 500<<10)}}), succeeded)
	add("meta-not-object", job("meta-not-object", map[string]any{"metadata": []int{1, 2}}), invalid)
	// JSON-escaped in the result (\u003c), the metadata grows sixfold past a NATS message.
	add("meta-html-150k", job("meta-html-150k", map[string]any{"metadata": map[string]string{"note": strings.Repeat("<>&", 50<<10)}}), anyEnd)
	// The job fills a NATS message (1 MiB on the embedded server); its result, with the
	// answer on top of the echoed metadata, cannot fit in one.
	near := job("meta-near-limit", map[string]any{"metadata": map[string]string{"note": ""}})
	add("meta-near-limit", job("meta-near-limit", map[string]any{"metadata": map[string]string{"note": strings.Repeat("m", (1<<20)-len(near)-600)}}), anyEnd)
	add("meta-deep", job("meta-deep", map[string]any{"metadata": json.RawMessage(`{"a":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + "}")}), anyEnd)
	return cs
}
