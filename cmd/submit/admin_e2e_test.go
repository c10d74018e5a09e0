package main

import (
	"encoding/json"
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

// A manifest error stops the run before anything is published, names the line and exits 2.
func TestEndToEndManifestErrorNamesTheLine(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	sys := startSystem(t, enginetest.New(), systemOptions{})
	dir := t.TempDir()
	writeImages(t, dir, 2)
	manifest := filepath.Join(dir, "set.jsonl")
	body := `{"image": "0000.png", "query": "dog"}` + "\n" + `{"image": "0001.png", "query": "dog"}` + "\n" + `{"image": "0001.png", "task": "segment"}` + "\n"
	if err := os.WriteFile(manifest, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := sys.submit(t, "--out", filepath.Join(dir, "out"), manifest)
	if code != ExitUsage {
		t.Errorf("exit %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(stderr, manifest+":3: task: \"segment\"") {
		t.Errorf("stderr %q does not name line 3 and its problem", stderr)
	}
	info, err := sys.topo.Jobs.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 0 {
		t.Errorf("%d jobs were published despite the manifest error", info.State.LastSeq)
	}
}

// `submit cancel --batch` cancels every queued and running job of a running batch; the
// run ends with every job canceled, reported as failed.
func TestEndToEndCancelBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	const n = 12
	eng, _ := gatedEngine(0) // never opened: all jobs stay queued or running
	sys := startSystem(t, eng, systemOptions{})
	dir := t.TempDir()
	writeImages(t, filepath.Join(dir, "frames"), n)
	out := filepath.Join(dir, "out")

	type outcome struct {
		code   int
		stdout string
	}
	done := make(chan outcome, 1)
	go func() {
		code, stdout, _ := sys.submit(t, "--out", out, "--batch", "cam7", "--query", "car", "--upload", "s3://images/up/", filepath.Join(dir, "frames"))
		done <- outcome{code, stdout}
	}()
	testwait.Until(t, time.Minute, "every job to be queued", func() bool {
		info, err := sys.topo.Jobs.Info(t.Context())
		return err == nil && info.State.Msgs == n
	})

	code, stdout, _ := sys.submit(t, "status", "--batch", "cam7")
	if code != ExitOK || !strings.Contains(stdout, "batch cam7: 12 in the queue") {
		t.Errorf("status before cancel: exit %d, %q", code, stdout)
	}
	code, stdout, _ = sys.submit(t, "cancel", "--batch", "cam7", "--reason", "wrong camera")
	if code != ExitOK || !strings.Contains(stdout, "cancel requested for 12 ") {
		t.Errorf("cancel: exit %d, %q", code, stdout)
	}
	var run outcome
	select {
	case run = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end after its batch was canceled")
	}
	if run.code != ExitJobsFailed || !strings.Contains(run.stdout, "12 submitted, 0 already done, 0 succeeded, 12 failed") {
		t.Errorf("run: exit %d, %q", run.code, run.stdout)
	}
	rows := readResults(t, out)
	for _, r := range rows {
		if r.Status != jobs.StatusCanceled || r.Error == nil || r.Error.Code != jobs.CodeCanceled {
			t.Errorf("row %s: %s %+v, want canceled", r.ID, r.Status, r.Error)
		}
	}
	if images, _ := answered(eng); images != 0 {
		t.Errorf("%d canceled images ran anyway", images)
	}
	code, stdout, _ = sys.submit(t, "status", rows[0].ID)
	if code != ExitOK || !strings.Contains(stdout, "job "+rows[0].ID+": canceled") || !strings.Contains(stdout, "cancel requested") ||
		!strings.Contains(stdout, "result: canceled, batch cam7") {
		t.Errorf("status of one job: exit %d, %q", code, stdout)
	}
	code, stdout, _ = sys.submit(t, "status", "--batch", "cam7")
	if code != ExitOK || !strings.Contains(stdout, "0 in the queue (queued or running), 12 finished (12 canceled)") {
		t.Errorf("status after cancel: exit %d, %q", code, stdout)
	}
}

// A job that fails for a reason that can be fixed lands in the DLQ; once fixed, replay
// runs it again and a rerun of the same submit collects the new result.
func TestEndToEndDLQReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	// A short duplicate window, so that the replayed job's new result is not taken for a
	// repeat of its first one (workers publish results with the job id as Nats-Msg-Id).
	sys := startSystem(t, enginetest.New(), systemOptions{topology: jobs.TopologyConfig{DuplicateWindow: time.Second}})
	dir := t.TempDir()
	writeImages(t, dir, 2)
	manifest := filepath.Join(dir, "set.csv")
	body := "image,query\n0000.png,dog\ns3://images/late/0001.png,dog\n"
	if err := os.WriteFile(manifest, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code, stdout, _ := sys.submit(t, "--out", out, "--upload", "s3://images/up/", manifest)
	if code != ExitJobsFailed || !strings.Contains(stdout, "2 submitted, 0 already done, 1 succeeded, 1 failed") {
		t.Fatalf("first run: exit %d, %q", code, stdout)
	}
	var missing submit.Row
	for _, r := range readResults(t, out) {
		if strings.HasSuffix(r.Source, ":3") {
			missing = r
		}
	}
	if missing.Status != jobs.StatusFailed || missing.Error == nil || missing.Error.Code != jobs.CodeNotFound {
		t.Fatalf("row of the missing image: %+v", missing)
	}

	code, stdout, _ = sys.submit(t, "dlq", "list")
	if code != ExitOK || !strings.Contains(stdout, missing.ID) || !strings.Contains(stdout, jobs.CodeNotFound) {
		t.Errorf("dlq list: exit %d, %q", code, stdout)
	}
	code, stdout, _ = sys.submit(t, "dlq", "show", missing.ID)
	var rec jobs.DLQRecord
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rec) != nil || rec.ID != missing.ID || rec.Code != jobs.CodeNotFound {
		t.Errorf("dlq show: exit %d, %q", code, stdout)
	}

	// Fix the cause, let the duplicate window pass, replay.
	png, err := os.ReadFile(filepath.Join(dir, "0001.png"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.s3.Client(t).PutObject(t.Context(), "images", "late/0001.png", strings.NewReader(string(png)), int64(len(png)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the server's window is wall-clock time; nothing to poll
	code, stdout, _ = sys.submit(t, "dlq", "replay", missing.ID)
	if code != ExitOK || !strings.Contains(stdout, "replayed "+missing.ID) {
		t.Fatalf("dlq replay: exit %d, %q", code, stdout)
	}
	code, stdout, _ = sys.submit(t, "dlq", "list")
	if code != ExitOK || !strings.Contains(stdout, "no dead-lettered jobs") {
		t.Errorf("dlq list after replay: exit %d, %q", code, stdout)
	}

	// The same submit again: nothing new is published, the replayed job's new result is
	// collected, and now everything succeeded.
	code, stdout, _ = sys.submit(t, "--out", out, "--upload", "s3://images/up/", manifest)
	if code != ExitOK || !strings.Contains(stdout, "0 submitted, 1 already done, 2 succeeded, 0 failed") {
		t.Errorf("run after replay: exit %d, %q", code, stdout)
	}
	rows, err := submit.ReadRows(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Status != jobs.StatusSucceeded {
			t.Errorf("row %s (%s): %s, want succeeded after the replay", r.ID, r.Source, r.Status)
		}
	}
	code, _, stderr := sys.submit(t, "dlq", "replay", missing.ID)
	if code != ExitUsage || !strings.Contains(stderr, "not in the dead-letter queue") {
		t.Errorf("second replay: exit %d, %q", code, stderr)
	}
}
