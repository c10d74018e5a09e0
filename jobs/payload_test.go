package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/enginetest"
)

// bigMetadata is a JSON object of exactly n bytes, compact, with characters JSON encoders
// like to escape (<, >, &) in it.
func bigMetadata(t *testing.T, n int) json.RawMessage {
	t.Helper()
	const head, tail = `{"note":"`, `"}`
	filler := strings.Repeat("<b>caf&eacute;</b> ", n/19+1)
	md := json.RawMessage(head + filler[:n-len(head)-len(tail)] + tail)
	if len(md) != n || !json.Valid(md) {
		t.Fatalf("metadata of %d bytes, valid %v; want %d", len(md), json.Valid(md), n)
	}
	return md
}

// encodeRaw is v as JSON without HTML escaping (< stays <), as a publisher may send it.
func encodeRaw(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// manyLabels is a detect query of n short categories: the test engine answers one box each
// (given the token budget), so the answer's lists grow with n.
func manyLabels(n int) string {
	labels := make([]string, n)
	for i := range labels {
		labels[i] = fmt.Sprintf("x%d", i)
	}
	return strings.Join(labels, "</c>")
}

// A job may carry almost a whole NATS message of metadata, which the result echoes, with
// the answer on top: more than a message holds. The result is stored in full and a
// reference to it is published, so the job ends instead of failing for ever to publish.
func TestOversizedResultIsPublishedAsAReference(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))
	limit := int(e.js.Conn().MaxPayload())

	md := bigMetadata(t, limit-8<<10)
	j := Job{ID: "big-meta", Image: img, Query: manyLabels(110), MaxNewTokens: 1024, Metadata: md}
	e.publish(t, encodeRaw(t, j), j.ID)
	res := e.publishedResult(t, DefaultBatch, j.ID)
	if res.Status != StatusSucceeded {
		t.Fatalf("status %s error %+v; want succeeded", res.Status, res.Error)
	}
	if !res.Truncated || res.ResultURL != ResultURL(defaultOutput, j.ID) || res.Metadata != nil || len(res.Detections) != 0 {
		t.Errorf("published: truncated %v result_url %q, %d bytes of metadata, %d detections; want a reference to %s",
			res.Truncated, res.ResultURL, len(res.Metadata), len(res.Detections), ResultURL(defaultOutput, j.ID))
	}
	full := e.storedResult(t, defaultOutput, j.ID)
	if full.Truncated || !bytes.Equal(full.Metadata, md) || len(full.Detections) != 110 || full.RawText == "" {
		t.Errorf("stored: truncated %v, metadata equal %v, %d detections; want the whole result", full.Truncated, bytes.Equal(full.Metadata, md), len(full.Detections))
	}
	full.Metadata, full.Detections, full.Points, full.RawText, full.Truncated = nil, res.Detections, res.Points, "", true
	if !reflect.DeepEqual(full, res) {
		t.Errorf("the reference differs from the stored result in more than the parts left out:\n%+v\n%+v", res, full)
	}
	if rec := e.dlqRecord(t, j.ID); rec != nil {
		t.Errorf("a succeeded job was dead-lettered: %+v", rec)
	}
}

// A ~900 KiB metadata object full of <, > and & comes back unchanged and in one message:
// the result is written without HTML escaping, which would have made it six times longer.
func TestMetadataIsEchoedAsSent(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))

	md := bigMetadata(t, 900<<10)
	e.publish(t, encodeRaw(t, Job{ID: "html-meta", Image: img, Query: "dog</c>cat", Metadata: md}), "html-meta")
	res := e.publishedResult(t, DefaultBatch, "html-meta")
	if res.Status != StatusSucceeded || res.Truncated || !bytes.Equal(res.Metadata, md) || len(res.Detections) != 2 {
		t.Errorf("status %s truncated %v, metadata equal %v, %d detections; want the whole result published",
			res.Status, res.Truncated, bytes.Equal(res.Metadata, md), len(res.Detections))
	}
}

// A job that fails for good while its message nearly fills a NATS message: its dead-letter
// record cannot carry it, so the job's bytes are stored next to the result and the record
// names them.
func TestOversizedDeadLetterRecordStoresTheJob(t *testing.T) {
	e := newTestEnv(t, testTopology())
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))
	limit := int(e.js.Conn().MaxPayload())

	j := Job{ID: "big-and-missing", Image: "s3://images/no-such.jpg", Query: "dog", Metadata: json.RawMessage(`{}`)}
	data, _ := json.Marshal(j)
	j.Metadata = bigMetadata(t, limit-len(data)-200) // the job just fits, with its header
	data = encodeRaw(t, j)
	e.publish(t, data, j.ID)

	res := e.publishedResult(t, DefaultBatch, j.ID)
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeNotFound {
		t.Fatalf("status %s error %+v; want failed with not_found", res.Status, res.Error)
	}
	rec := e.dlqRecord(t, j.ID)
	if rec == nil {
		t.Fatal("no dead-letter record")
	}
	if rec.Batch != DefaultBatch {
		t.Errorf("record's batch %q, want %q (the job named none)", rec.Batch, DefaultBatch)
	}
	if rec.Job != nil || rec.JobBase64 != nil || rec.JobURL != JobURL(defaultOutput, j.ID) || rec.Code != CodeNotFound {
		t.Fatalf("record: %d bytes of job, job_url %q, code %s; want the job left out and stored at %s",
			len(rec.Job)+len(rec.JobBase64), rec.JobURL, rec.Code, JobURL(defaultOutput, j.ID))
	}
	stored, err := e.store.Get(t.Context(), rec.JobURL, 0)
	if err != nil || !bytes.Equal(stored, data) {
		t.Errorf("stored job: %d bytes (%v); want the %d bytes published", len(stored), err, len(data))
	}
	if full := e.storedResult(t, defaultOutput, j.ID); !bytes.Equal(full.Metadata, j.Metadata) {
		t.Error("the stored result lost the metadata")
	}
}
