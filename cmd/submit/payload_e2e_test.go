package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// bigMetadata is a compact JSON object of exactly n bytes.
func bigMetadata(t *testing.T, n int) json.RawMessage {
	t.Helper()
	const head, tail = `{"note":"`, `"}`
	md := json.RawMessage(head + strings.Repeat("m", n-len(head)-len(tail)) + tail)
	if !json.Valid(md) {
		t.Fatal("metadata is not JSON")
	}
	return md
}

// manyLabels is a detect query of n short categories; the test engine answers one box each.
func manyLabels(n int) string {
	labels := make([]string, n)
	for i := range labels {
		labels[i] = fmt.Sprintf("x%d", i)
	}
	return strings.Join(labels, "</c>")
}

// writeManifestLine writes a one-line JSONL manifest for image with query and metadata.
func writeManifestLine(t *testing.T, dir, image, query string, md json.RawMessage) string {
	t.Helper()
	line, err := json.Marshal(map[string]any{"image": image, "query": query, "metadata": md})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "set.jsonl")
	if err := os.WriteFile(path, append(line, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A job with almost a whole NATS message of metadata and a long answer: the worker publishes
// a reference to its stored result, and submit writes the whole result to results.jsonl.
func TestEndToEndOversizedResultRoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	sys := startSystem(t, enginetest.New(), systemOptions{})
	dir := t.TempDir()
	writeImages(t, dir, 1)
	md := bigMetadata(t, int(sys.nc.MaxPayload())-8<<10) // ~1016 KiB
	manifest := writeManifestLine(t, dir, "0000.png", manyLabels(110), md)
	out := filepath.Join(dir, "out")
	code, stdout, _ := sys.submit(t, "--out", out, "--upload", "s3://images/up/", "--max-new-tokens", "1024", manifest)
	if code != ExitOK || !strings.Contains(stdout, "1 submitted, 0 already done, 1 succeeded, 0 failed") {
		t.Fatalf("run: exit %d, %q", code, stdout)
	}
	rows := readResults(t, out)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	if r.Truncated || !bytes.Equal(r.Metadata, md) || len(r.Detections) != 110 || r.RawText == "" {
		t.Errorf("row: truncated %v, metadata equal %v (%d bytes), %d detections; want the whole result",
			r.Truncated, bytes.Equal(r.Metadata, md), len(r.Metadata), len(r.Detections))
	}
	// What was published really was a reference: the whole result does not fit.
	msg, err := sys.topo.Results.GetLastMsgForSubject(t.Context(), jobs.ResultSubjectPrefix+"*."+r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var published jobs.Result
	if err := json.Unmarshal(msg.Data, &published); err != nil || !published.Truncated || published.ResultURL == "" {
		t.Errorf("published result: truncated %v result_url %q (%v); want a reference", published.Truncated, published.ResultURL, err)
	}
	code, stdout, _ = sys.submit(t, "status", r.ID)
	if code != ExitOK || !strings.Contains(stdout, "110 detections") {
		t.Errorf("status: exit %d, %q; want the whole result's 110 detections", code, stdout)
	}
}

// A job that fails for good while it nearly fills a NATS message: its dead-letter record
// names where the job's bytes are stored, and replay publishes them again.
func TestEndToEndOversizedDLQRecordReplays(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	sys := startSystem(t, enginetest.New(), systemOptions{topology: jobs.TopologyConfig{DuplicateWindow: time.Second}})
	dir := t.TempDir()
	writeImages(t, dir, 1)
	md := bigMetadata(t, int(sys.nc.MaxPayload())-1<<10) // the job just fits
	manifest := writeManifestLine(t, dir, "s3://images/late/0000.png", "dog", md)
	out := filepath.Join(dir, "out")
	code, stdout, _ := sys.submit(t, "--out", out, manifest)
	if code != ExitJobsFailed || !strings.Contains(stdout, "1 submitted, 0 already done, 0 succeeded, 1 failed") {
		t.Fatalf("first run: exit %d, %q", code, stdout)
	}
	row := readResults(t, out)[0]
	if row.Error == nil || row.Error.Code != jobs.CodeNotFound || !bytes.Equal(row.Metadata, md) {
		t.Fatalf("row: %s %+v, metadata equal %v; want not_found with the metadata", row.Status, row.Error, bytes.Equal(row.Metadata, md))
	}

	code, stdout, _ = sys.submit(t, "dlq", "show", row.ID)
	var rec jobs.DLQRecord
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rec) != nil || rec.JobURL == "" || rec.Job != nil {
		t.Fatalf("dlq show: exit %d, job_url %q, %d bytes of job; want the job left out and stored", code, rec.JobURL, len(rec.Job))
	}

	// Fix the cause, let the duplicate window pass, replay: the job comes from job_url.
	png, err := os.ReadFile(filepath.Join(dir, "0000.png"))
	must(t, err)
	if _, err := sys.s3.Client(t).PutObject(t.Context(), "images", "late/0000.png", bytes.NewReader(png), int64(len(png)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the server's window is wall-clock time; nothing to poll
	code, stdout, _ = sys.submit(t, "dlq", "replay", row.ID)
	if code != ExitOK || !strings.Contains(stdout, "replayed "+row.ID) {
		t.Fatalf("dlq replay: exit %d, %q", code, stdout)
	}
	code, stdout, _ = sys.submit(t, "--out", out, manifest)
	if code != ExitOK || !strings.Contains(stdout, "0 submitted, 0 already done, 1 succeeded, 0 failed") {
		t.Errorf("run after replay: exit %d, %q", code, stdout)
	}
	rows, err := submit.ReadRows(out)
	must(t, err)
	if len(rows) != 1 {
		t.Fatalf("%d jobs in results.jsonl, want 1", len(rows))
	}
	if r := rows[0]; r.Status != jobs.StatusSucceeded || !bytes.Equal(r.Metadata, md) || r.Truncated {
		t.Errorf("row after the replay: %s truncated %v, metadata equal %v; want succeeded with its metadata", r.Status, r.Truncated, bytes.Equal(r.Metadata, md))
	}
}
