package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/submit"
)

// 500 images and a corrupt one through the real queue and a real worker; the run is killed
// (SIGKILL, no chance to clean up) half way and resumed. No job may be published twice,
// every result must be collected once, and the corrupt image must end as a failed row
// with its reason and a non-zero exit code.
func TestEndToEndKilledRunResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts NATS, versitygw and a worker")
	}
	const n = 500
	eng, open := gatedEngine(100) // the first 100 images run, the rest wait until opened
	sys := startSystem(t, eng, systemOptions{})
	publishes := sys.countPublishes(t)

	dir := t.TempDir()
	frames := filepath.Join(dir, "frames")
	writeImages(t, frames, n)
	if err := os.WriteFile(filepath.Join(frames, "corrupt.jpg"), []byte("not a JPEG at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	args := []string{"run", "--out", out, "--query", "thing</c>other", "--upload", "s3://images/up", "--coco", frames}

	// First run, in a child process, killed once it has published every job and
	// collected some results.
	rawArgs, _ := json.Marshal(args)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childArgsEnv+"="+string(rawArgs))
	var childOut strings.Builder
	child.Stdout, child.Stderr = &childOut, &childOut
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	testwait.Until(t, 2*time.Minute, "the first run to publish everything and collect 100 results", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the first run ended before it was killed (%v):\n%s", err, childOut.String())
		default:
		}
		return countPublished(out) == n+1 && countLines(filepath.Join(out, submit.ResultsFile)) >= 100
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	before := len(readResults(t, out))
	if before >= n+1 {
		t.Fatalf("the first run had collected all %d results before the kill: nothing left to resume", before)
	}
	t.Logf("killed with %d of %d results collected", before, n+1)

	// Every image is 8x6, so every succeeded row has the same detections.
	img, err := os.ReadFile(filepath.Join(frames, "0000.png"))
	must(t, err)
	want, err := eng.Answer(engine.Request{Image: img, Query: "thing</c>other"})
	must(t, err)

	// Resume in this process, with the rest of the work allowed to run.
	open()
	code, stdout, _ := sys.submit(t, args...)
	if code != ExitJobsFailed {
		t.Errorf("exit code %d, want %d (a job failed)", code, ExitJobsFailed)
	}
	wantSummary := "0 submitted, " + strconv.Itoa(before) + " already done, 500 succeeded, 1 failed"
	if !strings.Contains(stdout, wantSummary) {
		t.Errorf("summary:\n%s\nwant %q", stdout, wantSummary)
	}

	// Every job's result is collected exactly once.
	rows := readResults(t, out)
	if len(rows) != n+1 {
		t.Errorf("%d rows, want %d", len(rows), n+1)
	}
	ids, sources := map[string]bool{}, map[string]bool{}
	var corrupt *submit.Row
	for i, r := range rows {
		if ids[r.ID] || sources[r.Source] {
			t.Errorf("row %d repeats job %s (%s)", i, r.ID, r.Source)
		}
		ids[r.ID], sources[r.Source] = true, true
		if filepath.Base(r.Source) == "corrupt.jpg" {
			corrupt = &rows[i]
		} else if r.Status != jobs.StatusSucceeded || len(r.Detections) != 2 || !reflect.DeepEqual(r.Detections, want.Detections) {
			t.Errorf("row %d: %s %+v, want the engine's thing and other: %+v", i, r.Status, r.Detections, want.Detections)
		}
	}
	if corrupt == nil {
		t.Fatal("no row for corrupt.jpg")
	}
	if corrupt.Status != jobs.StatusFailed || corrupt.Error == nil || corrupt.Error.Code != engine.CodeBadImage ||
		!strings.Contains(corrupt.Error.Message, "decode image") {
		t.Errorf("corrupt.jpg row: status %s, error %+v; want failed, bad_image with the reason", corrupt.Status, corrupt.Error)
	}

	// No job was published twice: not stored twice, not even sent twice.
	counts := publishes()
	if len(counts) != n+1 {
		t.Errorf("%d distinct jobs published, want %d", len(counts), n+1)
	}
	for id, c := range counts {
		if c != 1 {
			t.Errorf("job %s published %d times", id, c)
		}
		if !ids[id] {
			t.Errorf("job %s published but has no row", id)
		}
	}
	info, err := sys.topo.Jobs.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != n+1 {
		t.Errorf("LA_JOBS stored %d messages, want %d", info.State.LastSeq, n+1)
	}
	if images, most := answered(eng); images != n || most != 1 {
		t.Errorf("the engine ran %d images, one of them %d times; want %d images once each", images, most, n)
	}

	// The COCO export has every succeeded image and its boxes, numbered in the order of
	// the inputs whatever order the results came in, and rounded to 2 decimals.
	var coco submit.COCODataset
	data, err := os.ReadFile(filepath.Join(out, submit.COCOFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &coco); err != nil {
		t.Fatal(err)
	}
	b := want.Detections[0].Box
	wantBBox := [4]float64{roundTo2(b[0]), roundTo2(b[1]), roundTo2(b[2] - b[0]), roundTo2(b[3] - b[1])} // x, y, width, height
	if len(coco.Images) != n || len(coco.Annotations) != 2*n || len(coco.Categories) != 2 || coco.Annotations[0].BBox != wantBBox {
		t.Errorf("COCO: %d images, %d annotations, categories %+v, first box %v", len(coco.Images), len(coco.Annotations), coco.Categories, coco.Annotations[0].BBox)
	}
	for i, im := range coco.Images {
		if name := fmt.Sprintf("%04d.png", i); im.ID != i+1 || im.FileName != name {
			t.Fatalf("COCO image %d: id %d, file %q; want %d, %s", i, im.ID, im.FileName, i+1, name)
		}
	}

	// A third run finds everything done and publishes nothing.
	code, stdout, _ = sys.submit(t, args...)
	if code != ExitJobsFailed || !strings.Contains(stdout, "0 submitted, 501 already done, 500 succeeded, 1 failed") {
		t.Errorf("rerun: exit %d, output %q", code, stdout)
	}
	if got := len(publishes()); got != n+1 {
		t.Errorf("the rerun published: %d distinct jobs now", got)
	}
}

// The single-machine setup: no upload, the worker reads file:// URLs and writes results
// and overlays under a local root, which the CLI downloads into OUT/overlays. The same
// image under two names is one job.
func TestEndToEndFileURLsAndOverlays(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	root := t.TempDir()
	sys := startSystem(t, enginetest.New(), systemOptions{fileRoot: root})
	frames := filepath.Join(root, "frames")
	writeImages(t, frames, 5)
	dup, err := os.ReadFile(filepath.Join(frames, "0003.png"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(frames, "copy-of-3.png"), dup, 0o644))
	out := filepath.Join(root, "out")

	code, stdout, _ := sys.submit(t, "--out", out, "--query", "cat", "--task", "ground", "--overlay", frames)
	if code != ExitOK || !strings.Contains(stdout, "5 submitted, 0 already done, 5 succeeded, 0 failed") {
		t.Fatalf("exit %d, %q", code, stdout)
	}
	if !strings.Contains(stdout, "latency p50 ") || strings.Contains(stdout, "p50 -") {
		t.Errorf("no latency figures in %q", stdout)
	}
	rows := readResults(t, out)
	if len(rows) != 5 {
		t.Fatalf("%d rows, want 5", len(rows))
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Image, "file://"+frames+"/") || r.Task != engine.TaskGround {
			t.Errorf("row %s: image %s task %s, want a file:// URL under %s and task ground", r.ID, r.Image, r.Task, frames)
		}
		if r.OverlayURL == nil {
			t.Errorf("row %s has no overlay URL", r.ID)
			continue
		}
		// The output mirrors the input tree: frames/0001.png has overlays/0001.png.
		stem := strings.TrimSuffix(r.File, ".png")
		if r.OverlayFile != "overlays/"+stem+".png" {
			t.Errorf("row %s (%s): overlay_file %q, want overlays/%s.png", r.ID, r.File, r.OverlayFile, stem)
		}
		png, err := os.ReadFile(filepath.Join(out, r.OverlayFile))
		if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
			t.Errorf("overlay of %s: %v (%d bytes), want the PNG", r.ID, err, len(png))
		}
	}
}

// --overlay-format jpeg: every job asks for a JPEG overlay, the worker stores <id>.jpg and
// the CLI downloads it into OUT/overlays/<name>.jpg.
func TestEndToEndJPEGOverlays(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	root := t.TempDir()
	sys := startSystem(t, enginetest.New(), systemOptions{fileRoot: root})
	frames := filepath.Join(root, "frames")
	writeImages(t, frames, 3)
	out := filepath.Join(root, "out")

	code, stdout, _ := sys.submit(t, "--out", out, "--query", "cat", "--overlay", "--overlay-format", "jpeg", frames)
	if code != ExitOK || !strings.Contains(stdout, "3 submitted, 0 already done, 3 succeeded, 0 failed") {
		t.Fatalf("exit %d, %q", code, stdout)
	}
	rows := readResults(t, out)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for _, r := range rows {
		if r.OverlayURL == nil || !strings.HasSuffix(*r.OverlayURL, "/"+r.ID+".jpg") || r.OverlayFormat != overlay.JPEG {
			t.Errorf("row %s: overlay %v format %q, want <id>.jpg and jpeg", r.ID, r.OverlayURL, r.OverlayFormat)
			continue
		}
		stem := strings.TrimSuffix(r.File, ".png")
		if r.OverlayFile != "overlays/"+stem+".jpg" {
			t.Errorf("row %s (%s): overlay_file %q, want overlays/%s.jpg", r.ID, r.File, r.OverlayFile, stem)
		}
		pic, err := os.ReadFile(filepath.Join(out, submit.OverlaysDir, stem+".jpg"))
		if err != nil || !bytes.HasPrefix(pic, []byte{0xFF, 0xD8, 0xFF}) {
			t.Errorf("overlay of %s: %v (%d bytes), want the JPEG", r.ID, err, len(pic))
		}
		if _, err := os.Stat(filepath.Join(out, submit.OverlaysDir, stem+".png")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("overlay of %s also as .png: %v", r.ID, err)
		}
	}
}

// Ctrl-C: the run stops with exit 130 and says what is pending; everything JetStream
// acknowledged is recorded, so the rerun publishes nothing and collects everything.
func TestEndToEndInterruptAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	const n = 10
	eng, open := gatedEngine(0)
	sys := startSystem(t, eng, systemOptions{})
	publishes := sys.countPublishes(t)
	dir := t.TempDir()
	writeImages(t, dir, n)
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"--out", out, "--query", "dog", "--upload", "s3://images/up/", dir}

	ctx, interrupt := context.WithCancel(t.Context())
	type outcome struct {
		code   int
		stdout string
	}
	done := make(chan outcome, 1)
	go func() {
		var stdout, stderr strings.Builder
		code := Main(ctx, args, IO{Stdout: &stdout, Stderr: &stderr, LoadConfig: readConfig})
		done <- outcome{code, stdout.String()}
	}()
	testwait.Until(t, time.Minute, "every job to be queued", func() bool {
		info, err := sys.topo.Jobs.Info(t.Context())
		return err == nil && info.State.Msgs == n
	})
	interrupt()
	first := <-done
	if first.code != ExitInterrupted || !strings.Contains(first.stdout, "10 submitted, 0 already done, 0 succeeded, 0 failed (10 still pending") {
		t.Fatalf("interrupted run: exit %d, %q", first.code, first.stdout)
	}
	if got := countPublished(out); got != n {
		t.Errorf("state file records %d published jobs, want %d", got, n)
	}

	open()
	code, stdout, _ := sys.submit(t, args...)
	if code != ExitOK || !strings.Contains(stdout, "0 submitted, 0 already done, 10 succeeded, 0 failed") {
		t.Errorf("resumed run: exit %d, %q", code, stdout)
	}
	for id, c := range publishes() {
		if c != 1 {
			t.Errorf("job %s published %d times", id, c)
		}
	}
}

// An s3:// prefix is listed and its image objects are submitted by URL, not downloaded.
func TestEndToEndS3Prefix(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	sys := startSystem(t, enginetest.New(), systemOptions{})
	dir := t.TempDir()
	writeImages(t, dir, 3)
	for _, name := range []string{"0000.png", "0001.png", "0002.png"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		must(t, err)
		must(t, sys.store.Put(t.Context(), "s3://images/cam9/"+name, data, "image/png"))
	}
	must(t, sys.store.Put(t.Context(), "s3://images/cam9/notes.txt", []byte("not an image"), "text/plain"))
	out := filepath.Join(dir, "out")
	code, stdout, _ := sys.submit(t, "--out", out, "--query", "bird", "--batch", "cam9", "s3://images/cam9/")
	if code != ExitOK || !strings.Contains(stdout, "3 submitted, 0 already done, 3 succeeded, 0 failed") {
		t.Fatalf("exit %d, %q", code, stdout)
	}
	rows := readResults(t, out)
	for _, r := range rows {
		if !strings.HasPrefix(r.Image, "s3://images/cam9/") || r.Source != r.Image {
			t.Errorf("row %s: image %s source %s, want the s3 URL", r.ID, r.Image, r.Source)
		}
	}
	code, stdout, _ = sys.submit(t, "status", rows[0].ID)
	if code != ExitOK || !strings.Contains(stdout, ": succeeded (attempt 1 on test-worker)") || !strings.Contains(stdout, "1 detections") {
		t.Errorf("status: exit %d, %q", code, stdout)
	}
	code, _, stderr := sys.submit(t, "status", "0123abc")
	if code != ExitUsage || !strings.Contains(stderr, "unknown job") {
		t.Errorf("status of an unknown job: exit %d, %q", code, stderr)
	}
}

// roundTo2 rounds to 2 decimals, as the COCO export writes boxes.
func roundTo2(v float64) float64 { return math.Round(v*100) / 100 }
