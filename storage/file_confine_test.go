package storage_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestFileOutputRootsConfineWrites: with OutputRoots set, Put writes only below them and
// Stat, Get and List read only below FileRoots; links count where they lead.
func TestFileOutputRootsConfineWrites(t *testing.T) {
	base := t.TempDir()
	in, out, both := filepath.Join(base, "in"), filepath.Join(base, "out"), filepath.Join(base, "both")
	writeFile(t, filepath.Join(in, "a.jpg"), "image")
	writeFile(t, filepath.Join(out, "old.json"), "{}")
	writeFile(t, filepath.Join(both, "b.jpg"), "image")
	symlink(t, filepath.Join(in, "a.jpg"), filepath.Join(out, "link-to-in.jpg"))
	symlink(t, in, filepath.Join(out, "in-dir"))
	symlink(t, filepath.Join(out, "old.json"), filepath.Join(in, "link-to-out.json"))
	store := openRouter(t, storage.Config{FileRoots: []string{in, both}, OutputRoots: []string{out, both}})
	ctx := context.Background()
	u := func(p ...string) string { return "file://" + filepath.Join(p...) }

	if got, err := store.Get(ctx, u(in, "a.jpg"), 0); err != nil || string(got) != "image" {
		t.Errorf("Get below a file root = %q, %v", got, err)
	}
	if err := store.Put(ctx, u(out, "r/1.json"), []byte("{}"), ""); err != nil {
		t.Errorf("Put below an output root: %v", err)
	}
	if err := store.Put(ctx, u(both, "2.json"), []byte("{}"), ""); err != nil {
		t.Errorf("Put below a root in both lists: %v", err)
	}
	if _, err := store.Get(ctx, u(both, "b.jpg"), 0); err != nil {
		t.Errorf("Get below a root in both lists: %v", err)
	}
	for _, c := range []struct{ what, url string }{
		{"a file root", u(in, "new.json")},
		{"a file root through a link from an output root", u(out, "in-dir", "new.json")},
		{"a file root, over a link", u(out, "link-to-in.jpg")},
	} {
		err := store.Put(ctx, c.url, []byte("{}"), "")
		if !errors.Is(err, storage.ErrNotAllowed) || !strings.Contains(err.Error(), "LA_OUTPUT_ROOTS") {
			t.Errorf("Put into %s: %v; want ErrNotAllowed naming LA_OUTPUT_ROOTS", c.what, err)
		}
	}
	if _, err := os.Stat(filepath.Join(in, "new.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file appeared in a read-only root: %v", err)
	}
	for _, c := range []struct{ what, url string }{
		{"an output root", u(out, "old.json")},
		{"an output root through a link", u(in, "link-to-out.json")},
	} {
		if _, err := store.Get(ctx, c.url, 0); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Get from %s: %v; want ErrNotAllowed", c.what, err)
		}
		if _, err := store.Stat(ctx, c.url); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Stat of %s: %v; want ErrNotAllowed", c.what, err)
		}
	}
	if err := store.List(ctx, u(out)+"/", func(storage.Object) bool { return true }); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("List of an output root: %v; want ErrNotAllowed", err)
	}

	// Output roots alone: file:// writes, never reads.
	only := openRouter(t, storage.Config{OutputRoots: []string{out}})
	if err := only.Put(ctx, u(out, "3.json"), []byte("{}"), ""); err != nil {
		t.Errorf("Put with output roots only: %v", err)
	}
	if _, err := only.Get(ctx, u(out, "3.json"), 0); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Get with output roots only: %v; want ErrNotAllowed", err)
	}
	if _, err := storage.Open(storage.Config{OutputRoots: []string{filepath.Join(base, "missing")}, MaxImageBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "LA_OUTPUT_ROOTS") {
		t.Errorf("Open with a missing output root: %v; want an error naming LA_OUTPUT_ROOTS", err)
	}
}

// TestFileDeniedFolders: /etc, /proc, /sys, /dev and /run (and what is below them) are never
// read or written through file://, even under a root of "/" and through links, unless a
// root names the folder itself or one below it.
func TestFileDeniedFolders(t *testing.T) {
	store := openRouter(t, storage.Config{FileRoots: []string{"/"}})
	ctx := context.Background()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, "/etc/hostname", filepath.Join(dir, "abs.jpg"))
	rel, err := filepath.Rel(dir, "/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, rel, filepath.Join(dir, "rel.jpg"))
	symlink(t, "/proc/self", filepath.Join(dir, "self"))

	reads := []string{"/etc/hostname", "/etc/passwd", "/proc/self/status", "/proc/self/environ",
		"/sys/kernel/hostname", "/dev/null", "/dev/zero", "/run/secrets/x", "/etc",
		filepath.Join(dir, "abs.jpg"), filepath.Join(dir, "rel.jpg"), filepath.Join(dir, "self/status")}
	for _, p := range reads {
		if _, err := store.Get(ctx, "file://"+p, 0); !errors.Is(err, storage.ErrNotAllowed) || !storage.Permanent(err) {
			t.Errorf("Get %s: %v; want a permanent ErrNotAllowed", p, err)
		}
		if _, err := store.Stat(ctx, "file://"+p); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Stat %s: %v; want ErrNotAllowed", p, err)
		}
	}
	if err := store.List(ctx, "file:///etc/", func(storage.Object) bool { return true }); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("List /etc/: %v; want ErrNotAllowed", err)
	}
	name := "la-denied-" + randomHex(t) + ".json"
	for _, d := range []string{"/etc", "/dev/shm", "/run"} {
		p := filepath.Join(d, name)
		t.Cleanup(func() { os.Remove(p) })
		if err := store.Put(ctx, "file://"+p, []byte("{}"), ""); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Put %s: %v; want ErrNotAllowed", p, err)
		}
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Put %s wrote the file: %v", p, err)
		}
	}

	// A root that names a denied folder, or one below it, is served: the operator chose it.
	if info, err := os.Stat("/dev/shm"); err != nil || !info.IsDir() {
		t.Skipf("no /dev/shm: %v", err)
	}
	shm := openRouter(t, storage.Config{FileRoots: []string{"/", "/dev/shm"}})
	p := "file:///dev/shm/" + name
	if err := shm.Put(ctx, p, []byte("{}"), ""); err != nil {
		t.Errorf("Put %s with /dev/shm a root: %v", p, err)
	}
	if got, err := shm.Get(ctx, p, 0); err != nil || string(got) != "{}" {
		t.Errorf("Get %s with /dev/shm a root = %q, %v", p, got, err)
	}
	if _, err := shm.Get(ctx, "file:///dev/null", 0); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Get /dev/null with / and /dev/shm as roots: %v; want ErrNotAllowed", err)
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
