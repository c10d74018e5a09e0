package jobs

import (
	"testing"
	"time"
)

// TestQueuedJobsNamesTheBatchAsTheWorkerDoes: a queued job published without a batch is
// read as batch "default" (what the worker files its result under), so cancelling or
// counting batch "default" finds it; an invalid message is passed over.
func TestQueuedJobsNamesTheBatchAsTheWorkerDoes(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	e.publish(t, []byte(`{"id":"no-batch","image":"s3://images/a.png","query":"dog"}`), "no-batch")
	e.publish(t, []byte(`not a job`), "")
	e.publish(t, []byte(`{"id":"in-b","image":"s3://images/b.png","query":"dog","batch":"b"}`), "in-b")

	got := map[string]string{}
	err := QueuedJobs(t.Context(), e.js, func(j *Job, at time.Time) error {
		if at.IsZero() {
			t.Errorf("job %s: no publication time", j.ID)
		}
		got[j.ID] = j.Batch
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["no-batch"] != DefaultBatch || got["in-b"] != "b" {
		t.Fatalf("queued jobs and batches %v; want no-batch in %q and in-b in b", got, DefaultBatch)
	}

}
