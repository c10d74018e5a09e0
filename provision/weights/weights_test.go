package weights_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/locateanything/detect/provision/weights"
)

const (
	repo   = "nvidia/LocateAnything-3B"
	commit = "c32291ca5e996f5a7a485845b4f57a233936bba0"
)

func snapshotDir(cache string) string {
	return filepath.Join(cache, "models--nvidia--LocateAnything-3B", "snapshots", commit)
}

// writeSnapshot lays out a complete checkpoint snapshot in a Hugging Face cache.
func writeSnapshot(t *testing.T, cache string) string {
	t.Helper()
	dir := snapshotDir(cache)
	files := map[string]string{
		"config.json":                      `{}`,
		"model.safetensors.index.json":     `{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`,
		"model-00001-of-00002.safetensors": "1",
		"model-00002-of-00002.safetensors": "2",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
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

func TestResolveExplicitDir(t *testing.T) {
	dir := t.TempDir()
	got, err := weights.Resolve(context.Background(), weights.Options{Dir: dir, HubCache: t.TempDir()})
	if err != nil || got != dir {
		t.Fatalf("Resolve = %q, %v; want %q", got, err, dir)
	}
	_, err = weights.Resolve(context.Background(), weights.Options{Dir: filepath.Join(dir, "missing")})
	if err == nil || !strings.Contains(err.Error(), "LA_WEIGHTS_DIR") {
		t.Fatalf("Resolve of a missing dir: %v; want an error naming LA_WEIGHTS_DIR", err)
	}
}

func TestResolveCacheOrder(t *testing.T) {
	base := t.TempDir()
	hubCache, hfHome, home := filepath.Join(base, "hubcache"), filepath.Join(base, "hfhome"), filepath.Join(base, "home")
	inHubCache := writeSnapshot(t, hubCache)
	inHFHome := writeSnapshot(t, filepath.Join(hfHome, "hub"))
	inHome := writeSnapshot(t, filepath.Join(home, ".cache", "huggingface", "hub"))
	cases := []struct {
		opts weights.Options
		want string
	}{
		{weights.Options{Revision: commit, HubCache: hubCache, HFHome: hfHome, Home: home}, inHubCache},
		{weights.Options{Revision: commit, HFHome: hfHome, Home: home}, inHFHome},
		{weights.Options{Revision: commit, Home: home}, inHome},
	}
	for _, c := range cases {
		got, err := weights.Resolve(context.Background(), c.opts)
		if err != nil || got != c.want {
			t.Errorf("Resolve(%v) = %q, %v; want %q", c.opts, got, err, c.want)
		}
	}
}

func TestResolveBranchThroughRef(t *testing.T) {
	cache := t.TempDir()
	want := writeSnapshot(t, cache)
	writeFile(t, filepath.Join(cache, "models--nvidia--LocateAnything-3B", "refs", "main"), commit+"\n")
	got, err := weights.Resolve(context.Background(), weights.Options{HubCache: cache, Revision: "main"})
	if err != nil || got != want {
		t.Fatalf("Resolve(main) = %q, %v; want %q", got, err, want)
	}
}

// TestResolveNotFoundSaysWhatToSet covers an empty cache and a snapshot missing a shard.
func TestResolveNotFoundSaysWhatToSet(t *testing.T) {
	empty := t.TempDir()
	partial := t.TempDir()
	dir := writeSnapshot(t, partial)
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	for _, cache := range []string{empty, partial} {
		_, err := weights.Resolve(context.Background(), weights.Options{Revision: commit, HubCache: cache})
		if err == nil {
			t.Fatalf("Resolve in %s succeeded", cache)
		}
		for _, hint := range []string{"LA_WEIGHTS_DIR", "HF_HUB_CACHE", "LA_DOWNLOAD=1", commit} {
			if !strings.Contains(err.Error(), hint) {
				t.Errorf("error %q does not mention %s", err, hint)
			}
		}
		// Only a cache with nothing of the repository in it is "not cached"; an incomplete
		// snapshot is broken, and the worker must not fall back past it.
		if got, want := errors.Is(err, weights.ErrNotCached), cache == empty; got != want {
			t.Errorf("cache %s: errors.Is(err, ErrNotCached) = %t, want %t (%v)", cache, got, want, err)
		}
	}
	if _, err := weights.Resolve(context.Background(), weights.Options{Revision: "../x", HubCache: empty}); err == nil {
		t.Error("a revision with a path in it was accepted")
	}
}

// progressLog records Progress calls.
type progressLog struct {
	mu    sync.Mutex
	calls map[string][][2]int64
}

func (p *progressLog) record(file string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string][][2]int64{}
	}
	p.calls[file] = append(p.calls[file], [2]int64{done, total})
}

func (p *progressLog) last(file string) [2]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[file]
	if len(c) == 0 {
		return [2]int64{-2, -2}
	}
	return c[len(c)-1]
}

func downloadOptions(cache, endpoint string, progress *progressLog) weights.Options {
	return weights.Options{Revision: commit, HubCache: cache, Download: true, Endpoint: endpoint, Progress: progress.record}
}

// checkDownloaded verifies every file of the fake hub in the snapshot, each a link into
// blobs/<etag> as in a Hugging Face cache.
func checkDownloaded(t *testing.T, hub *fakeHub, cache, dir string) {
	t.Helper()
	if dir != snapshotDir(cache) {
		t.Fatalf("snapshot %q, want %q", dir, snapshotDir(cache))
	}
	for name, want := range hub.files {
		p := filepath.Join(dir, name)
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want the Hub's %d bytes", name, len(got), err, len(want))
		}
		target, err := filepath.EvalSymlinks(p)
		wantBlob := filepath.Join(cache, "models--nvidia--LocateAnything-3B", "blobs", hub.etag(name))
		if err != nil || target != wantBlob {
			t.Errorf("%s resolves to %q (%v), want the blob %q", name, target, err, wantBlob)
		}
	}
	incomplete, _ := filepath.Glob(filepath.Join(cache, "models--nvidia--LocateAnything-3B", "blobs", "*.incomplete"))
	if len(incomplete) > 0 {
		t.Errorf("partial files left behind: %q", incomplete)
	}
}

func TestDownload(t *testing.T) {
	hub, srv := newFakeHub(t)
	cache := t.TempDir()
	var progress progressLog
	dir, err := weights.Resolve(context.Background(), downloadOptions(cache, srv.URL, &progress))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	checkDownloaded(t, hub, cache, dir)
	for name, data := range hub.files {
		if got, want := progress.last(name), [2]int64{int64(len(data)), int64(len(data))}; got != want {
			t.Errorf("%s: last progress report %v, want %v", name, got, want)
		}
	}

	// Once cached, the snapshot is found without asking the Hub.
	before := hub.requestCount()
	again, err := weights.Resolve(context.Background(), downloadOptions(cache, srv.URL, &progress))
	if err != nil || again != dir {
		t.Fatalf("second Resolve = %q, %v", again, err)
	}
	if n := hub.requestCount() - before; n != 0 {
		t.Errorf("second Resolve made %d requests, want 0", n)
	}
}

// TestDownloadResumesAfterAnInterruption: the connection drops 100000 bytes into a shard;
// the retry asks for the rest only, and the file is complete and verified.
func TestDownloadResumesAfterAnInterruption(t *testing.T) {
	hub, srv := newFakeHub(t)
	const shard = "model-00001-of-00002.safetensors"
	hub.cutAfter[shard] = 100_000
	cache := t.TempDir()
	dir, err := weights.Resolve(context.Background(), downloadOptions(cache, srv.URL, &progressLog{}))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	checkDownloaded(t, hub, cache, dir)
	if got, want := hub.rangesOf(shard), []string{"", "bytes=100000-"}; !slices.Equal(got, want) {
		t.Errorf("Range headers %q, want %q", got, want)
	}
}

// TestDownloadResumesAnEarlierRun: a partial file left by a run that was killed is
// continued, not started over.
func TestDownloadResumesAnEarlierRun(t *testing.T) {
	hub, srv := newFakeHub(t)
	const shard = "model-00002-of-00002.safetensors"
	cache := t.TempDir()
	partial := filepath.Join(cache, "models--nvidia--LocateAnything-3B", "blobs", hub.etag(shard)+".incomplete")
	writeFile(t, partial, string(hub.files[shard][:123_456]))
	dir, err := weights.Resolve(context.Background(), downloadOptions(cache, srv.URL, &progressLog{}))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	checkDownloaded(t, hub, cache, dir)
	if got, want := hub.rangesOf(shard), []string{"bytes=123456-"}; !slices.Equal(got, want) {
		t.Errorf("Range headers %q, want %q", got, want)
	}
}

// TestDownloadRefusesACorruptFile: bytes whose sha256 differs from the Hub's X-Linked-Etag
// are refused, and neither the blob, the partial file nor a usable snapshot is left.
func TestDownloadRefusesACorruptFile(t *testing.T) {
	hub, srv := newFakeHub(t)
	const shard = "model-00001-of-00002.safetensors"
	hub.corrupt[shard] = true
	cache := t.TempDir()
	_, err := weights.Resolve(context.Background(), downloadOptions(cache, srv.URL, &progressLog{}))
	if err == nil || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), shard) {
		t.Fatalf("Resolve: %v; want a sha256 mismatch naming %s", err, shard)
	}
	blobs := filepath.Join(cache, "models--nvidia--LocateAnything-3B", "blobs")
	for _, p := range []string{filepath.Join(blobs, hub.etag(shard)), filepath.Join(blobs, hub.etag(shard)+".incomplete"),
		filepath.Join(snapshotDir(cache), shard)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left in place (%v)", p, err)
		}
	}
	// Offline, the cache must not pass for a complete snapshot.
	if _, err := weights.Resolve(context.Background(), weights.Options{Revision: commit, HubCache: cache}); err == nil {
		t.Error("the half-downloaded snapshot was accepted")
	}
}

func TestDownloadWithToken(t *testing.T) {
	hub, srv := newFakeHub(t)
	hub.token = "hf_secret_token"
	cache := t.TempDir()
	opts := downloadOptions(cache, srv.URL, &progressLog{})
	_, err := weights.Resolve(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Fatalf("Resolve without a token: %v; want an error naming HF_TOKEN", err)
	}
	opts.Token = "hf_wrong_token"
	if _, err := weights.Resolve(context.Background(), opts); err == nil || strings.Contains(err.Error(), "hf_wrong_token") {
		t.Fatalf("Resolve with a wrong token: %v; want an error that does not show the token", err)
	}
	opts.Token = hub.token
	dir, err := weights.Resolve(context.Background(), opts)
	if err != nil {
		t.Fatalf("Resolve with the token: %v", err)
	}
	checkDownloaded(t, hub, cache, dir)
}

// TestDownloadByBranch records the branch's commit in refs/, so the next start resolves it
// offline.
func TestDownloadByBranch(t *testing.T) {
	hub, srv := newFakeHub(t)
	cache := t.TempDir()
	opts := downloadOptions(cache, srv.URL, &progressLog{})
	opts.Revision = "main"
	dir, err := weights.Resolve(context.Background(), opts)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	checkDownloaded(t, hub, cache, dir)
	offline, err := weights.Resolve(context.Background(), weights.Options{HubCache: cache, Revision: "main"})
	if err != nil || offline != dir {
		t.Fatalf("offline Resolve(main) = %q, %v; want %q", offline, err, dir)
	}
}

func TestDownloadRefusesUnsafeFileNames(t *testing.T) {
	hub, srv := newFakeHub(t)
	hub.files["../../escape.json"] = []byte("{}")
	cache := t.TempDir()
	_, err := weights.Resolve(context.Background(), downloadOptions(cache, srv.URL, &progressLog{}))
	if err == nil || !strings.Contains(err.Error(), "escape.json") {
		t.Fatalf("Resolve: %v; want a refusal of the file name", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(cache)), "escape.json")); !os.IsNotExist(err) {
		t.Errorf("a file was written outside the cache: %v", err)
	}
}

func TestDownloadUnknownRevision(t *testing.T) {
	_, srv := newFakeHub(t)
	opts := downloadOptions(t.TempDir(), srv.URL, &progressLog{})
	opts.Revision = "0000000000000000000000000000000000000000"
	if _, err := weights.Resolve(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Resolve of an unknown revision: %v; want the Hub's 404", err)
	}
}
