package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestFileHardLinksAreRefused: a hard link inside a root is another name of a file that
// may lie outside every root (here, the fixture's secret). It is refused like a symbolic
// link out of the roots, for Get and Stat, and List does not show it; so is a hard link
// between two names inside the root (nothing tells the two cases apart). Once the file
// has one name again, it is served.
func TestFileHardLinksAreRefused(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	link := func(target, name string) {
		t.Helper()
		if err := os.Link(target, filepath.Join(f.root, name)); err != nil {
			t.Skipf("hard links: %v", err)
		}
	}
	link(filepath.Join(f.outside, "secret.jpg"), "secret.jpg")
	writeFile(t, filepath.Join(f.root, "a.jpg"), "inside")
	link(filepath.Join(f.root, "a.jpg"), "dedup.jpg")
	writeFile(t, filepath.Join(f.root, "single.jpg"), "single")

	for _, name := range []string{"secret.jpg", "dedup.jpg", "a.jpg"} {
		if got, err := f.store.Get(ctx, f.url(name), 0); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Get %s = %q, %v; want ErrNotAllowed", name, got, err)
		}
		if _, err := f.store.Stat(ctx, f.url(name)); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Stat %s: %v, want ErrNotAllowed", name, err)
		}
	}
	var listed []string
	if err := f.store.List(ctx, f.url("")+"/", func(o storage.Object) bool {
		listed = append(listed, filepath.Base(o.URL))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != "single.jpg" {
		t.Errorf("List = %v, want only single.jpg", listed)
	}

	if err := os.Remove(filepath.Join(f.root, "dedup.jpg")); err != nil {
		t.Fatal(err)
	}
	if got, err := f.store.Get(ctx, f.url("a.jpg"), 0); err != nil || string(got) != "inside" {
		t.Errorf("Get a.jpg with one name again = %q, %v", got, err)
	}
	// A symbolic link to a file with one name is still served.
	symlink(t, filepath.Join(f.root, "a.jpg"), filepath.Join(f.root, "sym.jpg"))
	if got, err := f.store.Get(ctx, f.url("sym.jpg"), 0); err != nil || string(got) != "inside" {
		t.Errorf("Get through a symbolic link = %q, %v", got, err)
	}
}
