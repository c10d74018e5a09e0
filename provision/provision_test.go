package provision_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/provision"
	"github.com/locateanything/detect/provision/weights"
)

const revision = "c32291ca5e996f5a7a485845b4f57a233936bba0"

// bundledDir is a stand-in bundled model: a directory with a config.json.
func bundledDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-shapes")
	writeFile(t, filepath.Join(dir, "config.json"), `{"text_config": {"hidden_size": 192, "num_hidden_layers": 4}}`)
	return dir
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func request(t *testing.T, dir, cache string) provision.Request {
	bundled := bundledDir(t)
	return provision.Request{
		Dir:     dir,
		Hub:     weights.Options{Revision: revision, HubCache: cache, Endpoint: "http://127.0.0.1:1"},
		Bundled: func() (string, error) { return bundled, nil },
	}
}

func TestNothingConfiguredFallsBackToTheBundledModel(t *testing.T) {
	got, err := provision.Choose(context.Background(), request(t, "", t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Model != "tiny-shapes" || got.Repo != "" || got.Revision != "" || !strings.Contains(got.Reason, "bundled") {
		t.Fatalf("choice %+v, want the bundled tiny-shapes with no Hub repository", got)
	}
}

func TestConfiguredButMissingIsAnError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	_, err := provision.Choose(context.Background(), request(t, missing, t.TempDir()))
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a configured directory that does not exist gave %v, want an error naming it", err)
	}
	notCheckpoint := t.TempDir()
	if _, err := provision.Choose(context.Background(), request(t, notCheckpoint, t.TempDir())); err == nil ||
		!strings.Contains(err.Error(), "config.json") {
		t.Fatalf("a configured directory without config.json gave %v, want an error", err)
	}
}

func TestFailedDownloadIsAnError(t *testing.T) {
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "hub down", http.StatusInternalServerError)
	}))
	defer hub.Close()
	r := request(t, "", t.TempDir())
	r.Hub.Download, r.Hub.Endpoint = true, hub.URL
	if got, err := provision.Choose(context.Background(), r); err == nil {
		t.Fatalf("a failed download fell back to %+v, want an error", got)
	}
}

func TestIncompleteSnapshotIsAnError(t *testing.T) {
	cache := t.TempDir()
	snapshot := filepath.Join(cache, "models--nvidia--LocateAnything-3B", "snapshots", revision)
	writeFile(t, filepath.Join(snapshot, "model.safetensors"), "x") // no config.json: cut short
	if got, err := provision.Choose(context.Background(), request(t, "", cache)); err == nil {
		t.Fatalf("an incomplete cached snapshot fell back to %+v, want an error", got)
	}
}

func TestPinnedSnapshotIsNamedLocateAnything3B(t *testing.T) {
	cache := t.TempDir()
	snapshot := filepath.Join(cache, "models--nvidia--LocateAnything-3B", "snapshots", revision)
	writeFile(t, filepath.Join(snapshot, "config.json"), `{}`)
	writeFile(t, filepath.Join(snapshot, "model.safetensors"), "x")
	got, err := provision.Choose(context.Background(), request(t, "", cache))
	if err != nil {
		t.Fatal(err)
	}
	if got.Dir != snapshot || got.Model != provision.ModelName || got.Repo != weights.Repo || got.Revision != revision {
		t.Fatalf("choice %+v, want the pinned snapshot %s named %s", got, snapshot, provision.ModelName)
	}
}

func TestConfiguredDirectoryIsNamedForWhatItHolds(t *testing.T) {
	threeB := filepath.Join(t.TempDir(), "weights")
	writeFile(t, filepath.Join(threeB, "config.json"), `{"text_config": {"hidden_size": 2048, "num_hidden_layers": 36}}`)
	got, err := provision.Choose(context.Background(), request(t, threeB, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Model != provision.ModelName || got.Repo != weights.Repo {
		t.Fatalf("a configured 3B checkpoint is %+v, want it named %s", got, provision.ModelName)
	}
	small := bundledDir(t)
	if got, err = provision.Choose(context.Background(), request(t, small, t.TempDir())); err != nil {
		t.Fatal(err)
	}
	if got.Model != "tiny-shapes" || got.Repo != "" {
		t.Fatalf("a configured small checkpoint is %+v, want it named by its directory, no Hub repository", got)
	}
}
