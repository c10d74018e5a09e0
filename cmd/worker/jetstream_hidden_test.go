package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestJobsNeverReachTheJetStreamStore: on the single-machine default the data directory
// (la-data, relative to the working directory) lies below the working directory, which
// jobs may read. The store the worker serves jobs with hides its JetStream store all the
// same, for reads and writes, while the rest of the working directory stays readable.
func TestJobsNeverReachTheJetStreamStore(t *testing.T) {
	wd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	unsetenv(t, "LA_DATA_DIR")
	unsetenv(t, "LA_FILE_ROOTS")
	unsetenv(t, "LA_OUTPUT_ROOTS")
	unsetenv(t, "LA_RESULTS_URL")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	block := filepath.Join(wd, "la-data/jetstream/jetstream/$G/streams/LA_JOBS/msgs/1.blk")
	for p, body := range map[string]string{block: "job bytes", filepath.Join(wd, "frames/a.jpg"): "image"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(wd, "la-data/results"), 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := storage.Open(cfg.JobStorage())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := t.Context()
	if got, err := store.Get(ctx, "file://"+block, 0); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Get of the JetStream store's block = %q, %v; want ErrNotAllowed", got, err)
	}
	if got, err := store.Get(ctx, "file://"+filepath.Join(wd, "frames/a.jpg"), 0); err != nil || string(got) != "image" {
		t.Errorf("Get below the working directory = %q, %v", got, err)
	}
	if err := store.Put(ctx, cfg.ResultsURL+"r.json", []byte("{}"), ""); err != nil {
		t.Errorf("Put of a result: %v", err)
	}
}
