package console_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

type jobPageJSON struct {
	ID     string
	Batch  string
	Job    json.RawMessage
	State  *jobs.State
	Queued *struct {
		Sequence    uint64
		Subject     string
		PublishedAt time.Time `json:"published_at"`
	}
	Result json.RawMessage
}

// TestConsoleShowsAQueuedJob: a job published while no worker takes jobs (the consumer
// paused) has no result, no dead-letter record and no state entry; its page says it is
// queued, with its batch, its job JSON and where it is in LA_JOBS. That holds for a job
// the lookup reads on demand, for one already indexed, for a job named only by its
// Nats-Msg-Id and for one named by its sequence; once a worker has run it, its page
// shows the result and no queue. (The index's merge with the overview's scan is
// TestQueuedIndexScanKeepsNewerLookups.)
func TestConsoleShowsAQueuedJob(t *testing.T) {
	e := newEnv(t, nil)
	e.start(t, nil)
	if _, err := e.js.PauseConsumer(t.Context(), jobs.JobsStream, jobs.ConsumerName, time.Now().Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	queued := func(id, batch string) jobPageJSON {
		t.Helper()
		var page jobPageJSON
		if code := e.get(t, "/console/api/jobs/"+id, &page); code != http.StatusOK {
			t.Fatalf("GET jobs/%s: %d, want 200", id, code)
		}
		if page.State == nil || page.State.Status != jobs.StatusQueued || page.Batch != batch || page.Queued == nil ||
			page.Queued.Subject != jobs.JobSubject(jobs.DefaultClass) || page.Queued.Sequence == 0 || time.Since(page.Queued.PublishedAt) > time.Minute {
			t.Errorf("jobs/%s: state %+v, batch %q, queued %+v; want queued in batch %q on %s", id, page.State, page.Batch, page.Queued, batch, jobs.JobSubject(jobs.DefaultClass))
		}
		return page
	}

	e.publish(t, jobs.Job{ID: "filler-1", Image: e.image("dog.jpg"), Query: "dog", Batch: "fill"})
	e.publish(t, jobs.Job{ID: "waiting", Image: e.image("dog.jpg"), Query: "a dog", Batch: "b-queued"})
	page := queued("waiting", "b-queued")
	var j jobs.Job
	if err := json.Unmarshal(page.Job, &j); err != nil || j.ID != "waiting" || j.Query != "a dog" {
		t.Errorf("jobs/waiting: job JSON %s (%v), want the job as published", page.Job, err)
	}
	if string(page.Result) != "null" {
		t.Errorf("jobs/waiting: result %s, want null", page.Result)
	}

	// filler-1 was indexed by the read that found waiting; by-header is read on demand.
	queued("filler-1", "fill")
	b, _ := json.Marshal(map[string]string{"image": e.image("dog.jpg"), "query": "no id"})
	if _, err := e.js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b, jetstream.WithMsgID("by-header")); err != nil {
		t.Fatal(err)
	}
	queued("by-header", jobs.DefaultBatch)
	ack, err := e.js.PublishMsg(t.Context(), &nats.Msg{Subject: jobs.JobSubject(jobs.DefaultClass), Data: []byte("not a job")})
	if err != nil {
		t.Fatal(err)
	}
	if page := queued(jobs.SeqKey(ack.Sequence), jobs.DefaultBatch); string(page.Job) != "null" {
		t.Errorf("a message that is not JSON: job %s, want null", page.Job)
	}
	if code := e.get(t, "/console/api/jobs/seq="+strconv.FormatUint(ack.Sequence+100, 10), nil); code != http.StatusNotFound {
		t.Errorf("a sequence past the stream: %d, want 404", code)
	}
	if code := e.get(t, "/console/api/jobs/never-published", nil); code != http.StatusNotFound {
		t.Errorf("jobs/never-published: %d, want 404", code)
	}

	if _, err := e.js.ResumeConsumer(t.Context(), jobs.JobsStream, jobs.ConsumerName); err != nil {
		t.Fatal(err)
	}
	if r := e.waitResult(t, "waiting"); r.Status != jobs.StatusSucceeded {
		t.Fatalf("waiting: %s", r.Status)
	}
	// The message goes once the worker acknowledges it, just after the result is stored.
	var done jobPageJSON
	testwait.Until(t, time.Minute, "the page of the job run to show it done, not queued", func() bool {
		done = jobPageJSON{}
		code := e.get(t, "/console/api/jobs/waiting", &done)
		return code == http.StatusOK && done.Queued == nil && done.State != nil && done.State.Status == jobs.StatusSucceeded
	})

	// Without its queue (LA_JOBS gone, so the queue lookup fails) a finished job's page
	// still shows what is known of it.
	if err := e.js.DeleteStream(t.Context(), jobs.JobsStream); err != nil {
		t.Fatal(err)
	}
	var orphan jobPageJSON
	if code := e.get(t, "/console/api/jobs/waiting", &orphan); code != http.StatusOK || orphan.State == nil || orphan.State.Status != jobs.StatusSucceeded {
		t.Errorf("jobs/waiting without LA_JOBS: %d, state %+v; want 200, succeeded", code, orphan.State)
	}
}
