package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/locateanything/detect/storage"
)

// TestFilePutRemovesOrphanTemporaries: a writer killed between creating its temporary
// file and renaming it (kill -9, power loss) leaves a .la-tmp-* file behind. The next Put
// into that folder removes the ones older than an hour, and leaves younger ones alone: they
// may belong to another worker writing right now.
func TestFilePutRemovesOrphanTemporaries(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	out := filepath.Join(f.root, "out")
	old := []string{".la-tmp-a.json-0123456789abcdef", ".la-tmp-b.png-fedcba9876543210"}
	young := ".la-tmp-c.json-0011223344556677"
	for _, name := range append(slices.Clone(old), young, "kept.json") {
		writeFile(t, filepath.Join(out, name), "half written")
	}
	writeFile(t, filepath.Join(f.root, "elsewhere", old[0]), "half written")
	long := time.Now().Add(-2 * time.Hour)
	for _, p := range []string{filepath.Join(out, old[0]), filepath.Join(out, old[1]), filepath.Join(out, "kept.json"), filepath.Join(f.root, "elsewhere", old[0])} {
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}
	mkdir(t, filepath.Join(out, ".la-tmp-folder")) // not a file: never removed
	if err := os.Chtimes(filepath.Join(out, ".la-tmp-folder"), long, long); err != nil {
		t.Fatal(err)
	}

	if err := f.store.Put(ctx, f.url("out/r.json"), []byte("{}"), "application/json"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{".la-tmp-c.json-0011223344556677", ".la-tmp-folder", "kept.json", "r.json"}
	if !slices.Equal(names, want) {
		t.Errorf("after a Put the folder holds %q, want %q", names, want)
	}
	if _, err := os.Stat(filepath.Join(f.root, "elsewhere", old[0])); err != nil {
		t.Errorf("a Put into out/ touched another folder: %v", err)
	}
}

// TestFileTemporariesOfAStoreThatDiedAreRemovedByTheNext: the sweep happens once per
// folder per Store for a while; a new Store (a restarted worker) sweeps again.
func TestFileTemporariesOfAStoreThatDiedAreRemovedByTheNext(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	if err := f.store.Put(ctx, f.url("out/1.json"), []byte("{}"), ""); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(f.root, "out", ".la-tmp-2.json-0123456789abcdef")
	writeFile(t, orphan, "half written")
	long := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(orphan, long, long); err != nil {
		t.Fatal(err)
	}
	next := openRouter(t, storage.Config{FileRoots: []string{f.root}})
	if err := next.Put(ctx, f.url("out/3.json"), []byte("{}"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(orphan); !os.IsNotExist(err) {
		t.Errorf("the orphan is still there after a new Store wrote into its folder: %v", err)
	}
}
