package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/jobs"
)

// TestJobsCannotReadTheJetStreamStore: on the single-machine default with the data
// directory inside the working tree (la-data, as `make run` has it), a job naming a file of
// the embedded JetStream store fails bad_url, with the same answer as for a file that is
// not there and no size, while a job reading an image elsewhere in the tree succeeds.
func TestJobsCannotReadTheJetStreamStore(t *testing.T) {
	workTree, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(filepath.Join(testImages, "dog.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(workTree, "dog.jpg"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(workTree, "la-data")
	addr := freeport.MustAddr(t)
	for k, v := range map[string]string{
		"LA_DATA_DIR": dataDir, "LA_NATS_LISTEN": addr, "LA_METRICS_ADDR": "off", "LA_HTTP_ADDR": "off",
		"LA_WORKER_NAME": "w1", "LA_POLL_WAIT": "200ms",
	} {
		t.Setenv(k, v)
	}
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(workTree); err != nil {
		t.Fatal(err)
	}
	startWorker(t, cfg, enginetest.New())
	js := publisher(t, addr)

	// A file the running server has written: the job stream's metadata.
	store := filepath.Join(dataDir, "jetstream")
	var block string
	if err := filepath.WalkDir(store, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && block == "" && strings.Contains(p, jobs.JobsStream) {
			block = p
		}
		return nil
	}); err != nil || block == "" {
		t.Fatalf("no file of %s in the JetStream store %s (%v)", jobs.JobsStream, store, err)
	}
	missing := filepath.Join(filepath.Dir(block), "no-such-file")
	cases := map[string]jobs.Job{
		"js-file":    {Image: "file://" + block, Query: "x"},
		"js-missing": {Image: "file://" + missing, Query: "x"},
		"js-write":   {Image: "file://" + filepath.Join(workTree, "dog.jpg"), Query: "dog", Output: "file://" + store + "/"},
		"good":       {Image: "file://" + filepath.Join(workTree, "dog.jpg"), Query: "dog"},
	}
	got, _ := runJobs(t, js, cases)
	if r := got["good"]; r.Status != jobs.StatusSucceeded {
		t.Errorf("the job inside the working tree: %s %+v", r.Status, r.Error)
	}
	for _, id := range []string{"js-file", "js-missing", "js-write"} {
		r := got[id]
		if r.Status != jobs.StatusFailed || r.Error == nil || r.Error.Code != jobs.CodeBadURL {
			t.Errorf("%s: status %s error %+v; want failed bad_url", id, r.Status, r.Error)
		}
	}
	if a, b := got["js-file"].Error, got["js-missing"].Error; a != nil && b != nil &&
		strings.ReplaceAll(a.Message, block, "PATH") != strings.ReplaceAll(b.Message, missing, "PATH") {
		t.Errorf("the answers tell an existing file of the store from a missing one:\n%s\n%s", a.Message, b.Message)
	}
	if _, err := os.Stat(filepath.Join(store, "js-write.json")); err == nil {
		t.Error("a job wrote into the JetStream store")
	}
}
