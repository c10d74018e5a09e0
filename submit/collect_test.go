package submit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// A reference read while storage is down is read again until storage is back; a reference
// to nothing is kept as it is, with the reason.
func TestFullResultWaitsOutAStorageOutage(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "results")
	store, err := storage.Open(storage.Config{Endpoint: srv.URL(), Region: s3test.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: "true", MaxImageBytes: 1 << 20})
	must(t, err)
	t.Cleanup(func() { store.Close() })
	full := jobs.Result{ID: "j1", Status: jobs.StatusSucceeded, Metadata: json.RawMessage(`{"a":1}`),
		ResultURL: "s3://results/j1.json"}
	body, err := json.Marshal(full)
	must(t, err)
	must(t, store.Put(t.Context(), full.ResultURL, body, "application/json"))
	ref := full
	ref.Metadata, ref.Truncated = nil, true

	srv.Stop()
	warned := make(chan error, 16)
	done := make(chan jobs.Result, 1)
	go func() {
		got, err := fullResult(t.Context(), store, ref, func(err error) bool { warned <- err; return true })
		if err != nil {
			t.Errorf("fullResult: %v", err)
		}
		done <- got
	}()
	select {
	case err := <-warned:
		t.Logf("warned: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no warning while storage was down")
	}
	srv.Restart()
	select {
	case got := <-done:
		if got.Truncated || string(got.Metadata) != `{"a":1}` {
			t.Errorf("got truncated %v metadata %s; want the stored result", got.Truncated, got.Metadata)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("fullResult did not return after storage came back")
	}

	ref.ResultURL = "s3://results/missing.json"
	if got, err := fullResult(t.Context(), store, ref, func(error) bool { return true }); err == nil || !got.Truncated {
		t.Errorf("a reference to a missing object: %+v, %v; want it back with an error", got, err)
	}
}
