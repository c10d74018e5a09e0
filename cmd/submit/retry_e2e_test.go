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
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/submit"
)

// `submit retry --batch` runs a batch's failed jobs again from their dead-letter records:
// once the cause of one is fixed, it succeeds and a rerun of the same submit collects it;
// the one still broken fails again and can be retried again; a job that succeeded is
// never run twice, and canceled or expired jobs are refused with the reason.
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
	if code != ExitUsage || !strings.Contains(stderr, "not dead-lettered") {
		t.Errorf("retry --canceled: exit %d, %q; want exit 2 saying why", code, stderr)
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
