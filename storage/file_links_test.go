package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestFileAbsoluteLinksInsideTheRoot: links written with an absolute target (what `ln -s
// "$PWD/x"` makes) work when the target lies inside the root, for reads, writes and
// listings alike; os.Root alone refuses every absolute target.
func TestFileAbsoluteLinksInsideTheRoot(t *testing.T) {
	f := newFileFixture(t)
	checkAbsoluteLinks(t, f.store, f.root)
}

// TestFileAbsoluteLinksUnderTheRootOfEverything: the same with "/" as the root, the
// worker's single-machine default.
func TestFileAbsoluteLinksUnderTheRootOfEverything(t *testing.T) {
	store := openRouter(t, storage.Config{FileRoots: []string{"/"}})
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkAbsoluteLinks(t, store, dir)
}

func checkAbsoluteLinks(t *testing.T, store *storage.Router, dir string) {
	t.Helper()
	ctx := context.Background()
	url := func(rel string) string { return "file://" + filepath.Join(dir, rel) }
	writeFile(t, filepath.Join(dir, "real/a.jpg"), "inside")
	symlink(t, filepath.Join(dir, "real/a.jpg"), filepath.Join(dir, "abs.jpg"))
	symlink(t, filepath.Join(dir, "real"), filepath.Join(dir, "absdir"))
	symlink(t, filepath.Join(dir, "absdir"), filepath.Join(dir, "chain/to-absdir")) // a link to a link
	symlink(t, "../absdir/a.jpg", filepath.Join(dir, "chain/relative.jpg"))
	symlink(t, filepath.Join(dir, "out-real"), filepath.Join(dir, "out")) // an output folder not made yet

	for _, rel := range []string{"abs.jpg", "absdir/a.jpg", "chain/to-absdir/a.jpg", "chain/relative.jpg"} {
		got, err := store.Get(ctx, url(rel), 0)
		if err != nil || string(got) != "inside" {
			t.Errorf("Get %s = %q, %v; want the linked file", rel, got, err)
		}
		if obj, err := store.Stat(ctx, url(rel)); err != nil || obj.Size != int64(len("inside")) || obj.URL != url(rel) {
			t.Errorf("Stat %s = %+v, %v", rel, obj, err)
		}
	}

	// Writes follow the links too: into the folder a link names, and through a link to a
	// folder that does not exist yet.
	for rel, lands := range map[string]string{"absdir/r.json": "real/r.json", "out/x/r.json": "out-real/x/r.json"} {
		if err := store.Put(ctx, url(rel), []byte(rel), "application/json"); err != nil {
			t.Errorf("Put %s: %v", rel, err)
			continue
		}
		if got, err := os.ReadFile(filepath.Join(dir, lands)); err != nil || string(got) != rel {
			t.Errorf("Put %s: %s holds %q, %v", rel, lands, got, err)
		}
	}

	var listed []string
	err := store.List(ctx, "file://"+dir+"/", func(o storage.Object) bool {
		listed = append(listed, strings.TrimPrefix(o.URL, "file://"+dir+"/"))
		return true
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := []string{"abs.jpg", "chain/relative.jpg", "out-real/x/r.json", "real/a.jpg", "real/r.json"}
	if !slices.Equal(listed, want) {
		t.Errorf("List = %q, want %q (links to files listed, links to folders not followed)", listed, want)
	}
}

// TestFileLinksOutOfEveryRootArePermanent: a link leading out of every root, by an absolute
// or a relative target, or into a loop, is refused at once as a permanent failure, never
// as something to retry.
func TestFileLinksOutOfEveryRootArePermanent(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	symlink(t, filepath.Join(f.outside, "secret.jpg"), filepath.Join(f.root, "abs-escape.jpg"))
	symlink(t, f.outside, filepath.Join(f.root, "abs-outdir"))
	symlink(t, "/", filepath.Join(f.root, "slash"))
	symlink(t, "loop-b", filepath.Join(f.root, "loop-a"))
	symlink(t, "loop-a", filepath.Join(f.root, "loop-b"))
	symlink(t, filepath.Join(f.root, "self"), filepath.Join(f.root, "self"))
	for _, rel := range []string{"abs-escape.jpg", "abs-outdir/secret.jpg", "abs-outdir/new.json", "slash" + f.outside + "/secret.jpg", "loop-a", "loop-b/x.json", "self"} {
		if _, err := f.store.Get(ctx, f.url(rel), 0); !errors.Is(err, storage.ErrNotAllowed) || !storage.Permanent(err) {
			t.Errorf("Get %s: %v; want a permanent ErrNotAllowed", rel, err)
		}
		if err := f.store.Put(ctx, f.url(rel), []byte("x"), ""); !errors.Is(err, storage.ErrNotAllowed) || !storage.Permanent(err) {
			t.Errorf("Put %s: %v; want a permanent ErrNotAllowed", rel, err)
		}
	}
	if entries, _ := os.ReadDir(f.outside); len(entries) != 1 {
		t.Errorf("the outside folder holds %d entries; want the secret alone", len(entries))
	}
}

// TestFileLinksAcrossRoots: a link in one root whose target lies in another root works; the
// file is opened through the root that holds it.
func TestFileLinksAcrossRoots(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	writeFile(t, filepath.Join(b, "img.jpg"), "in b")
	symlink(t, filepath.Join(b, "img.jpg"), filepath.Join(a, "abs.jpg"))
	symlink(t, "../b/img.jpg", filepath.Join(a, "rel.jpg"))
	store := openRouter(t, storage.Config{FileRoots: []string{a, b}})
	for _, rel := range []string{"abs.jpg", "rel.jpg"} {
		if got, err := store.Get(context.Background(), "file://"+filepath.Join(a, rel), 0); err != nil || string(got) != "in b" {
			t.Errorf("Get %s = %q, %v", rel, got, err)
		}
	}
}
