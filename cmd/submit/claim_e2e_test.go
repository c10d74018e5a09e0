package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/submit"
)

// A job whose id another message already owns (issue 23: one run per job id) ends
// duplicate_id on this batch's subject; submit reports it as failed with that code, and
// `dlq replay` refuses to publish it again under the id it lost.
func TestEndToEndDuplicateIDIsReportedFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	sys := startSystem(t, enginetest.New(), systemOptions{})
	dir := t.TempDir()
	frames, out := filepath.Join(dir, "frames"), filepath.Join(dir, "out")
	writeImages(t, frames, 2)
	args := []string{"--out", out, "--batch", "mine", "--query", "dog", "--upload", "s3://images/up/", frames}

	var plan submit.DryRunReport
	code, stdout, _ := sys.submit(t, append([]string{"run", "--dry-run", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(stdout), &plan); code != ExitOK || err != nil || len(plan.Jobs) != 2 || plan.Jobs[0].ID == "" {
		t.Fatalf("dry run: exit %d, %v, %q", code, err, stdout)
	}
	taken := plan.Jobs[0].ID
	// Another message, of batch "squatters", owns the id already.
	claim, err := json.Marshal(jobs.Claim{StreamSeq: 1 << 40, Batch: "squatters", Digest: "other"})
	must(t, err)
	if _, err := sys.topo.State.KV().Create(t.Context(), jobs.ClaimKey(taken), claim); err != nil {
		t.Fatal(err)
	}

	code, stdout, _ = sys.submit(t, args...)
	if code != ExitJobsFailed || !strings.Contains(stdout, "2 submitted, 0 already done, 1 succeeded, 1 failed") {
		t.Fatalf("run: exit %d, %q; rows %+v", code, stdout, readResults(t, out))
	}
	var row submit.Row
	for _, r := range readResults(t, out) {
		if r.ID == taken {
			row = r
		}
	}
	if row.Status != jobs.StatusFailed || row.Error == nil || row.Error.Code != jobs.CodeDuplicateID ||
		!strings.Contains(row.Error.Message, "batch squatters") {
		t.Errorf("row of the job whose id was taken: %+v", row)
	}
	code, _, stderr := sys.submit(t, "dlq", "replay", taken)
	if code == ExitOK || !strings.Contains(stderr, jobs.CodeDuplicateID) {
		t.Errorf("dlq replay of a duplicate_id record: exit %d, %q", code, stderr)
	}
}
