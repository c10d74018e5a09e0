package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestFileHiddenFolders: a hidden folder (the worker's JetStream store) is never read,
// written or listed, though it lies below a root, whether it exists when the store opens
// or is made later, and whether it is named directly or through a link.
func TestFileHiddenFolders(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "work")
	store := filepath.Join(root, "la-data", "jetstream")
	later := filepath.Join(root, "la-data", "later")
	writeFile(t, filepath.Join(store, "jetstream/$G/streams/LA_JOBS/msgs/1.blk"), "job bytes")
	writeFile(t, filepath.Join(root, "la-data/results/r.json"), "{}")
	symlink(t, filepath.Join(root, "la-data"), filepath.Join(root, "data-link"))
	s := openRouter(t, storage.Config{FileRoots: []string{root}, Hidden: []string{store, later}})
	writeFile(t, filepath.Join(later, "x.blk"), "made after the store opened")
	ctx := context.Background()
	url := func(rel string) string { return "file://" + filepath.Join(root, rel) }

	for _, rel := range []string{
		"la-data/jetstream/jetstream/$G/streams/LA_JOBS/msgs/1.blk", "data-link/jetstream/jetstream/$G/streams/LA_JOBS/msgs/1.blk",
		"la-data/later/x.blk", "la-data/jetstream", "la-data/jetstream/missing.blk",
	} {
		if got, err := s.Get(ctx, url(rel), 0); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Get %s = %q, %v; want ErrNotAllowed", rel, got, err)
		}
		if err := s.Put(ctx, url(rel+"/new.json"), []byte("{}"), ""); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Put below %s: %v, want ErrNotAllowed", rel, err)
		}
	}
	if err := s.Put(ctx, url("la-data/jetstream/new.json"), []byte("{}"), ""); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Put into the hidden folder: %v, want ErrNotAllowed", err)
	}
	if _, err := os.Lstat(filepath.Join(store, "new.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written into the hidden folder (%v)", err)
	}
	var listed []string
	if err := s.List(ctx, url("")+"/", func(o storage.Object) bool {
		listed = append(listed, strings.TrimPrefix(o.URL, url("")+"/"))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != "la-data/results/r.json" {
		t.Errorf("List = %v, want only la-data/results/r.json", listed)
	}

	// A root inside a hidden folder serves nothing either.
	inside := openRouter(t, storage.Config{FileRoots: []string{store}, Hidden: []string{store}})
	if _, err := inside.Get(ctx, "file://"+filepath.Join(store, "jetstream/$G/streams/LA_JOBS/msgs/1.blk"), 0); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Get below a root inside the hidden folder: %v, want ErrNotAllowed", err)
	}
}
