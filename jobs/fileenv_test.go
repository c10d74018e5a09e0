package jobs

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage"
)

// fileEnv is a testEnv whose storage is file:// only, below one root: images in it, the
// default output its results/ folder (the worker's single-machine layout). No S3 server.
type fileEnv struct {
	*testEnv
	root    string // resolved, so that URLs and paths on disk agree
	results string // the default output's folder
	image   string // file:// URL of a JPEG below the root
}

func newFileEnv(t *testing.T) *fileEnv {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fileEnv{root: root, results: filepath.Join(root, "results")}
	if err := os.MkdirAll(f.results, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(root, "images/dog.jpg")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, readTestdata(t, "dog.jpg"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.image = "file://" + img
	store, err := storage.Open(storage.Config{FileRoots: []string{root}, MaxImageBytes: 32 << 20})
	if err != nil {
		t.Fatalf("open storage: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ns := natstest.Start(t)
	js, topo := connectTopology(t, ns, testTopology())
	f.testEnv = &testEnv{nats: ns, js: js, topo: topo, store: store,
		log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	return f
}

// output is the default output prefix, file://<root>/results/.
func (f *fileEnv) output() string { return "file://" + f.results + "/" }

// runnerConfig writes to the default output below the root.
func (f *fileEnv) runnerConfig(worker string) RunnerConfig {
	cfg := f.testEnv.runnerConfig(worker)
	cfg.DefaultOutput = f.output()
	return cfg
}
