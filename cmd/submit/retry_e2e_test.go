package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/submit"
)

// `submit retry --batch` runs a batch's failed jobs again from their dead-letter records:
// once the cause of one is fixed, it succeeds and a rerun of the same submit collects it;
// the one still broken fails again and can be retried again; a job that succeeded is
// never run twice, and canceled or expired jobs need the batch's output directory.
func TestEndToEndRetryBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	eng := enginetest.New()
	sys := startSystem(t, eng, systemOptions{topology: jobs.TopologyConfig{DuplicateWindow: time.Second}})
	dir := t.TempDir()
	writeImages(t, dir, 3)
	manifest := filepath.Join(dir, "set.csv")
	body := "image,query\n0000.png,dog\ns3://images/late/0001.png,dog\ns3://images/late/0002.png,dog\n"
	must(t, os.WriteFile(manifest, []byte(body), 0o644))
	out := filepath.Join(dir, "out")
	args := []string{"--out", out, "--batch", "b1", "--upload", "s3://images/up/", manifest}
	code, stdout, _ := sys.submit(t, args...)
	if code != ExitJobsFailed || !strings.Contains(stdout, "3 submitted, 0 already done, 1 succeeded, 2 failed") {
		t.Fatalf("first run: exit %d, %q", code, stdout)
	}

	code, _, stderr := sys.submit(t, "retry", "--batch", "b1", "--canceled")
	if code != ExitUsage || !strings.Contains(stderr, "need --out DIR") {
		t.Errorf("retry --canceled without --out: exit %d, %q; want exit 2 asking for the output directory", code, stderr)
	}
	if code, _, stderr = sys.submit(t, "retry"); code != ExitUsage || !strings.Contains(stderr, "--batch is required") {
		t.Errorf("retry without --batch: exit %d, %q", code, stderr)
	}

	// Fix one cause, let the duplicate window pass, retry the batch.
	png, err := os.ReadFile(filepath.Join(dir, "0001.png"))
	must(t, err)
	if _, err := sys.s3.Client(t).PutObject(t.Context(), "images", "late/0001.png", strings.NewReader(string(png)), int64(len(png)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the server's window is wall-clock time; nothing to poll
	code, stdout, _ = sys.submit(t, "retry", "--batch", "b1", "--json")
	var rep submit.RetryReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Retried) != 2 || len(rep.Skipped) != 0 {
		t.Fatalf("retry: exit %d, %q; want the 2 failed jobs retried", code, stdout)
	}

	code, stdout, _ = sys.submit(t, args...)
	// (0002 counts as already done when its retry failed again before this run looked:
	// a replay that failed again is not told apart from the first failure.)
	if code != ExitJobsFailed || !strings.Contains(stdout, "0 submitted, ") || !strings.Contains(stdout, " already done, 2 succeeded, 1 failed") ||
		!strings.Contains(stdout, "set.csv:4: "+jobs.CodeNotFound) {
		t.Errorf("run after retry: exit %d, %q; want 0001 collected, 0002 failed again", code, stdout)
	}
	if images, most := answered(eng); images != 2 || most != 1 {
		t.Errorf("the engine ran %d images, one %d times; want 0000 and 0001 once each", images, most)
	}

	// Again: only the job still failing is retried.
	time.Sleep(1100 * time.Millisecond)
	code, stdout, _ = sys.submit(t, "retry", "--batch", "b1")
	if code != ExitOK || strings.Count(stdout, "retried ") != 1 || !strings.Contains(stdout, "1 failed jobs published again, 0 skipped") {
		t.Errorf("second retry: exit %d, %q; want the one job still failing", code, stdout)
	}
	rows, err := submit.ReadRows(out)
	must(t, err)
	for _, r := range rows {
		if strings.HasSuffix(r.Source, ":4") && !strings.Contains(stdout, "retried "+r.ID) {
			t.Errorf("second retry did not retry the failing job %s: %q", r.ID, stdout)
		}
	}
}

// `submit retry --canceled --out DIR` runs a batch's canceled jobs again from the jobs
// `submit run` recorded in DIR (the queue kept no message of them): a canceled run's jobs
// succeed after the retry and a rerun of the same submit collects them; a retry before
// they ended skips them, the wrong directory is refused, and an expired job of the batch
// that another producer published (no record of it in DIR) is skipped with the reason.
func TestEndToEndRetryCanceled(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	const n = 2
	eng, open := gatedEngine(0) // closed: the jobs wait at the gate until canceled
	sys := startSystem(t, eng, systemOptions{})
	dir := t.TempDir()
	writeImages(t, filepath.Join(dir, "frames"), n)
	out := filepath.Join(dir, "out")
	args := []string{"--out", out, "--batch", "cam7", "--query", "car", "--overlay", "--upload", "s3://images/up/", filepath.Join(dir, "frames")}
	done := make(chan string, 1)
	go func() {
		code, stdout, _ := sys.submit(t, args...)
		done <- fmt.Sprintf("exit %d, %s", code, stdout)
	}()
	testwait.Until(t, time.Minute, "every job to be queued", func() bool {
		info, err := sys.topo.Jobs.Info(t.Context())
		return err == nil && info.State.Msgs == n
	})
	if code, stdout, _ := sys.submit(t, "cancel", "--batch", "cam7"); code != ExitOK || !strings.Contains(stdout, "cancel requested for 2 ") {
		t.Fatalf("cancel: exit %d, %q", code, stdout)
	}
	select {
	case run := <-done:
		if !strings.Contains(run, "exit 1, ") || !strings.Contains(run, "2 submitted, 0 already done, 0 succeeded, 2 failed") {
			t.Fatalf("canceled run: %s", run)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end after its batch was canceled")
	}
	// Another producer's job of the same batch, expired before it started.
	past := time.Now().Add(-time.Hour)
	foreign := jobs.Job{V: jobs.SchemaVersion, ID: "foreign-1", Image: "s3://images/up/none.png", Query: "car", Batch: "cam7", Deadline: &past}
	data, err := json.Marshal(foreign)
	must(t, err)
	_, err = sys.js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), data)
	must(t, err)
	testwait.Until(t, time.Minute, "the foreign job to expire", func() bool {
		st, ok, err := sys.topo.State.Get(t.Context(), foreign.ID)
		return err == nil && ok && st.Status == jobs.StatusExpired
	})
	open()

	other := t.TempDir()
	writeImages(t, filepath.Join(other, "x"), 1)
	if code, _, _ := sys.submit(t, "--out", filepath.Join(other, "out"), "--batch", "other", "--query", "car", "--upload", "s3://images/up/", filepath.Join(other, "x")); code != ExitOK {
		t.Fatalf("the other batch: exit %d", code)
	}
	before := eng.Answers()
	for _, bad := range []string{filepath.Join(other, "out"), t.TempDir()} {
		if code, _, stderr := sys.submit(t, "retry", "--batch", "cam7", "--canceled", "--out", bad); code != ExitUsage ||
			!strings.Contains(stderr, bad) {
			t.Errorf("retry --out %s: exit %d, %q; want exit 2 naming the directory", bad, code, stderr)
		}
	}

	code, stdout, _ := sys.submit(t, "retry", "--batch", "cam7", "--canceled", "--expired", "--out", out, "--json")
	var rep submit.RetryReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Retried) != n || len(rep.Skipped) != 1 ||
		rep.Skipped[0].ID != foreign.ID || !strings.Contains(rep.Skipped[0].Why, "holds no record of this job") {
		t.Fatalf("retry --canceled --expired: exit %d, %q; want the 2 canceled jobs retried and the foreign one skipped", code, stdout)
	}
	code, stdout, _ = sys.submit(t, args...)
	if code != ExitOK || !strings.Contains(stdout, "0 submitted, 0 already done, 2 succeeded, 0 failed") {
		t.Errorf("run after retry: exit %d, %q; want both jobs collected, succeeded", code, stdout)
	}
	rows := readResults(t, out)
	if len(rows) != 2*n {
		t.Errorf("results.jsonl has %d rows, want %d: the canceled ones, then their new results", len(rows), 2*n)
	}
	for _, r := range rows[len(rows)-n:] { // the rows written after the retry
		if r.Status != jobs.StatusSucceeded || r.OverlayURL == nil {
			t.Errorf("row %s after retry: %s, overlay %v; want succeeded with its overlay (the job as first published)", r.ID, r.Status, r.OverlayURL)
		}
	}
	for sum, answers := range eng.Answers() { // the other batch's image is frames/0000.png again
		if answers-before[sum] != 1 {
			t.Errorf("after the retry the engine answered image %x %d times, want once", sum[:4], answers-before[sum])
		}
	}
	if len(eng.Answers()) != n {
		t.Errorf("the engine answered %d images, want the %d of the batch", len(eng.Answers()), n)
	}
	// Nothing is canceled any more: a second retry publishes nothing.
	code, stdout, _ = sys.submit(t, "retry", "--batch", "cam7", "--canceled", "--out", out)
	if code != ExitOK || !strings.Contains(stdout, "0 canceled jobs published again, 0 skipped") {
		t.Errorf("second retry: exit %d, %q", code, stdout)
	}
}
