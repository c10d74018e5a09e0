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
	"github.com/nats-io/nats.go/jetstream"

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
// they ended skips them, the wrong directory is refused, and expired jobs of the batch
// are skipped with the reason: one another producer published (no record of it in DIR),
// and one recorded there, since its deadline is in its bytes (--expired publishes nothing).
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
	runCanceled(t, sys, "cam7", n, args...)
	// Other producers' jobs of the same batch, expired before they started; the second is
	// recorded in the directory, as published (so it matches its claim).
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	var foreign []jobs.Job
	for _, id := range []string{"foreign-1", "foreign-2"} {
		j := jobs.Job{V: jobs.SchemaVersion, ID: id, Image: "s3://images/up/none.png", Query: "car", Batch: "cam7", Deadline: &past}
		data, err := json.Marshal(j)
		must(t, err)
		_, err = sys.js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), data)
		must(t, err)
		testwait.Until(t, time.Minute, "the foreign job to expire", func() bool {
			st, ok, err := sys.topo.State.Get(t.Context(), id)
			return err == nil && ok && st.Status == jobs.StatusExpired
		})
		foreign = append(foreign, j)
	}
	line, err := json.Marshal(map[string]any{"published": foreign[1].ID, "job": foreign[1]})
	must(t, err)
	f, err := os.OpenFile(filepath.Join(out, submit.StateFile), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.Write(append(line, '\n'))
	must(t, err)
	must(t, f.Close())
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
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Retried) != n || len(rep.Skipped) != 2 ||
		rep.Skipped[0].ID != foreign[0].ID || !strings.Contains(rep.Skipped[0].Why, "holds no record of this job") ||
		rep.Skipped[1].ID != foreign[1].ID || !strings.Contains(rep.Skipped[1].Why, "would expire again at once") {
		t.Fatalf("retry --canceled --expired: exit %d, %q; want the 2 canceled jobs retried, the foreign ones skipped: "+
			"no record, and expired (its deadline is in its bytes)", code, stdout)
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

// `submit retry --canceled` publishes a recorded job, with the operator's rights, only
// when it is the message that owned the id: a record whose query was changed after the
// cancel (submit-state.jsonl is the producer's file) is skipped with the reason and
// nothing is published for it, while the untampered canceled job of the same batch is
// retried and succeeds. An untampered record encodes to exactly its claim's digest.
func TestEndToEndRetryCanceledSkipsTamperedRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	const n = 2
	eng, open := gatedEngine(0)
	sys := startSystem(t, eng, systemOptions{})
	dir := t.TempDir()
	writeImages(t, filepath.Join(dir, "frames"), n)
	out := filepath.Join(dir, "out")
	args := []string{"--out", out, "--batch", "cam9", "--query", "car", "--upload", "s3://images/up/", filepath.Join(dir, "frames")}
	runCanceled(t, sys, "cam9", n, args...)
	open()

	// Each recorded job re-encodes to exactly the digest its worker claimed it with.
	statePath := filepath.Join(out, submit.StateFile)
	body, err := os.ReadFile(statePath)
	must(t, err)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var ids []string
	for _, line := range lines[1:] {
		var rec struct {
			Job *jobs.Job `json:"job"`
		}
		must(t, json.Unmarshal([]byte(line), &rec))
		if rec.Job == nil {
			continue
		}
		data, err := json.Marshal(rec.Job)
		must(t, err)
		c, ok, err := sys.topo.State.ClaimOf(t.Context(), rec.Job.ID)
		if err != nil || !ok || c.Digest != jobs.Digest(data) || c.Batch != "cam9" {
			t.Fatalf("claim of %s: %+v, %v, %v; want the recorded job's digest %s", rec.Job.ID, c, ok, err, jobs.Digest(data))
		}
		ids = append(ids, rec.Job.ID)
	}
	if len(ids) != n {
		t.Fatalf("%s records %d jobs, want %d", statePath, len(ids), n)
	}
	tampered, kept := ids[0], ids[1]
	for i, line := range lines {
		if strings.Contains(line, `"published":"`+tampered+`"`) {
			lines[i] = strings.Replace(line, `"query":"car"`, `"query":"anything the producer likes"`, 1)
			if lines[i] == line {
				t.Fatalf("no query to tamper with in %s", line)
			}
		}
	}
	must(t, os.WriteFile(statePath, []byte(strings.Join(lines, "\n")+"\n"), 0o644))

	publishes := sys.countPublishes(t)
	code, stdout, _ := sys.submit(t, "retry", "--batch", "cam9", "--canceled", "--out", out, "--json")
	var rep submit.RetryReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Retried) != 1 || rep.Retried[0] != kept ||
		len(rep.Skipped) != 1 || rep.Skipped[0].ID != tampered || !strings.Contains(rep.Skipped[0].Why, "not the message that owned this id") {
		t.Fatalf("retry --canceled: exit %d, %q; want %s retried and %s skipped as not the id's message", code, stdout, kept, tampered)
	}
	for msgID, count := range publishes() {
		if strings.Contains(msgID, tampered) {
			t.Errorf("retry published %d messages for the tampered job (msg id %s), want none", count, msgID)
		}
	}
	if st, _, err := sys.topo.State.Get(t.Context(), tampered); err != nil || st.Status != jobs.StatusCanceled {
		t.Errorf("tampered job: state %v, %v; want canceled, untouched", st.Status, err)
	}
	code, stdout, _ = sys.submit(t, args...)
	if !strings.Contains(stdout, "0 submitted, 1 already done, 1 succeeded, 1 failed") {
		t.Errorf("run after retry: exit %d, %q; want the kept job succeeded, the tampered one still canceled", code, stdout)
	}
	if images, most := answered(eng); images != 1 || most != 1 {
		t.Errorf("the engine ran %d images, one %d times; want the kept job's image once", images, most)
	}
}

// A publish JetStream acknowledges as a duplicate stored nothing: the stream holds
// another message under that id. submit run records it so, not as the job, and `submit
// retry --canceled` skips it with the reason instead of publishing the directory's job
// under the id. (Here: the batch submitted again into a new directory inside the
// duplicate window, after the job's state was cleared.)
func TestEndToEndRetryCanceledSkipsDuplicatePublish(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	eng, open := gatedEngine(0)
	sys := startSystem(t, eng, systemOptions{})
	dir := t.TempDir()
	writeImages(t, filepath.Join(dir, "frames"), 1)
	run := func(out string) chan string {
		done := make(chan string, 1)
		go func() {
			code, stdout, _ := sys.submit(t, "--out", out, "--batch", "cam8", "--query", "car", "--upload", "s3://images/up/", filepath.Join(dir, "frames"))
			done <- fmt.Sprintf("exit %d, %s", code, stdout)
		}()
		return done
	}
	runCanceled(t, sys, "cam8", 1, "--out", filepath.Join(dir, "first"), "--batch", "cam8", "--query", "car", "--upload", "s3://images/up/", filepath.Join(dir, "frames"))
	open()
	id := readResults(t, filepath.Join(dir, "first"))[0].ID
	testwait.Until(t, time.Minute, "the job's state to be canceled", func() bool {
		st, ok, err := sys.topo.State.Get(t.Context(), id)
		return err == nil && ok && st.Status == jobs.StatusCanceled
	})
	// The result and state are cleared so that the second run publishes the job (inside
	// the duplicate window: acknowledged as a duplicate) and then waits for its result,
	// which is put back once the publish is recorded.
	subject := jobs.ResultSubject("cam8", id)
	result, err := sys.topo.Results.GetLastMsgForSubject(t.Context(), subject)
	must(t, err)
	must(t, sys.topo.Results.Purge(t.Context(), jetstream.WithPurgeSubject(subject)))
	must(t, sys.topo.State.KV().Delete(t.Context(), id))

	second := filepath.Join(dir, "second")
	done := run(second)
	testwait.Until(t, time.Minute, "the second run to record its publish", func() bool {
		b, err := os.ReadFile(filepath.Join(second, submit.StateFile))
		return err == nil && strings.Contains(string(b), `"published":"`+id+`"`)
	})
	_, err = sys.js.Publish(t.Context(), subject, result.Data)
	must(t, err)
	if r := <-done; !strings.Contains(r, "1 submitted, 0 already done, 0 succeeded, 1 failed") {
		t.Fatalf("second run: %s; want the job published again (acknowledged as a duplicate), then its result collected", r)
	}
	code, stdout, _ := sys.submit(t, "retry", "--batch", "cam8", "--canceled", "--out", second, "--json")
	var rep submit.RetryReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Retried) != 0 || len(rep.Skipped) != 1 ||
		!strings.Contains(rep.Skipped[0].Why, "acknowledged as a duplicate") {
		t.Fatalf("retry --canceled --out %s: exit %d, %q; want the job skipped as a duplicate publish", second, code, stdout)
	}
}

// runCanceled runs `submit args...` (a run of n jobs of batch, which the engine holds at
// its gate) until all n are queued, cancels the batch, and waits for the run to end with
// every job canceled (exit ExitJobsFailed, all n counted failed).
func runCanceled(t *testing.T, sys *system, batch string, n int, args ...string) {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		code, stdout, _ := sys.submit(t, args...)
		done <- fmt.Sprintf("exit %d, %s", code, stdout)
	}()
	testwait.Until(t, time.Minute, "every job to be queued", func() bool {
		info, err := sys.topo.Jobs.Info(t.Context())
		return err == nil && info.State.Msgs == uint64(n)
	})
	if code, stdout, _ := sys.submit(t, "cancel", "--batch", batch); code != ExitOK || !strings.Contains(stdout, fmt.Sprintf("cancel requested for %d ", n)) {
		t.Fatalf("cancel: exit %d, %q", code, stdout)
	}
	select {
	case run := <-done:
		want := fmt.Sprintf("%d submitted, 0 already done, 0 succeeded, %d failed", n, n)
		if !strings.HasPrefix(run, fmt.Sprintf("exit %d, ", ExitJobsFailed)) || !strings.Contains(run, want) {
			t.Fatalf("canceled run: %s", run)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end after its batch was canceled")
	}
}
