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

// TestEmbeddedDefaultConfinesJobs: on the single-machine default any local process can
// publish a job, so a job must not make the worker read or write outside the working tree
// and LA_DATA_DIR, and a failure must not quote what a file holds (issue: a job wrote
// /etc/<id>.json as root and echoed /etc/shadow's first bytes into its result).
func TestEmbeddedDefaultConfinesJobs(t *testing.T) {
	dataDir, outside := t.TempDir(), t.TempDir()
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
	workTree, err := filepath.Abs(testImages)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(workTree); err != nil { // no LA_FILE_ROOTS: the defaults under test
		t.Fatal(err)
	}
	startWorker(t, cfg, enginetest.New())
	js := publisher(t, addr)

	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("root:*:20000:0:99999:7:::"), 0o600); err != nil {
		t.Fatal(err)
	}
	dog := "file://" + filepath.Join(workTree, "dog.jpg")
	cases := map[string]jobs.Job{
		"read-outside": {Image: "file://" + secret, Query: "x"},
		"read-etc":     {Image: "file:///etc/passwd", Query: "x"},
		"read-proc":    {Image: "file:///proc/self/environ", Query: "x"},
		"write-etc":    {Image: dog, Query: "dog", Output: "file:///etc/"},
		"write-out":    {Image: dog, Query: "dog", Output: "file://" + outside + "/"},
		"good":         {Image: dog, Query: "dog"},
	}
	got, raw := runJobs(t, js, cases)
	for id, data := range raw {
		if strings.Contains(string(data), "root:") || strings.Contains(string(data), "LA_DATA_DIR=") {
			t.Errorf("result %s quotes a file's contents: %s", id, data)
		}
	}
	for id := range cases {
		r := got[id]
		if id == "good" {
			if r.Status != jobs.StatusSucceeded {
				t.Errorf("the job inside the working tree: %s %+v", r.Status, r.Error)
			}
			continue
		}
		if r.Status != jobs.StatusFailed || r.Error == nil || r.Error.Code != jobs.CodeBadURL || r.Attempt != 1 {
			t.Errorf("%s: status %s attempt %d error %+v; want failed bad_url on the first delivery", id, r.Status, r.Attempt, r.Error)
		}
	}
	for _, dir := range []string{outside, "/etc"} {
		for _, id := range []string{"write-etc", "write-out"} {
			if _, err := os.Stat(filepath.Join(dir, id+".json")); err == nil {
				t.Errorf("a job wrote %s", filepath.Join(dir, id+".json"))
			}
		}
	}
}
