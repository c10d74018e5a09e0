package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestFilePutNeverCreatesAFolderNamedLikeAResult: the squat of issue #23 through the store.
// A Put below victim-1.json/ (or .png/, .jpg/, a temporary name) would make a folder where
// the result of job victim-1 goes, and that job would then fail "is a folder". The Put is
// refused, nothing is created, and the victim's own result is then written.
func TestFilePutNeverCreatesAFolderNamedLikeAResult(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	for _, squat := range []string{
		"victim-1.json/squatter.json", "victim-1.png/squatter.json", "victim-1.JPG/squatter.json",
		"victim-1.job.json/squatter.json", ".la-tmp-victim-1.json-0123/squatter.json",
		"sub/victim-1.json/deeper/squatter.json",
	} {
		err := f.store.Put(ctx, f.url(squat), []byte("{}"), "application/json")
		if !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Put %s: %v, want ErrNotAllowed", squat, err)
		}
	}
	for _, victim := range []string{"victim-1.json", "victim-1.png", "victim-1.JPG", "victim-1.job.json", "sub/victim-1.json"} {
		if _, err := os.Lstat(filepath.Join(f.root, victim)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after the refused Puts (%v)", victim, err)
		}
		if err := f.store.Put(ctx, f.url(victim), []byte("mine"), ""); err != nil {
			t.Errorf("the victim's Put %s: %v", victim, err)
		}
	}

	// A folder the operator made is used whatever its name: only creating one is refused.
	mkdir(t, filepath.Join(f.root, "archive.json"))
	if err := f.store.Put(ctx, f.url("archive.json/r.json"), []byte("{}"), ""); err != nil {
		t.Errorf("Put into an existing folder named archive.json: %v", err)
	}
}

// TestFilePutRefusesALinkInTheTargetsPlace: a result path taken by a symbolic link is
// refused, whether the link leads to a file inside the roots (which the Put would have
// replaced) or nowhere yet (which the Put would have created); the link and its target
// are left as they were.
func TestFilePutRefusesALinkInTheTargetsPlace(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	writeFile(t, filepath.Join(f.root, "other/kept.json"), "kept")
	symlink(t, filepath.Join(f.root, "other/kept.json"), filepath.Join(f.root, "out/victim-1.json"))
	symlink(t, filepath.Join(f.root, "other/new.json"), filepath.Join(f.root, "out/victim-2.json"))
	for _, rel := range []string{"out/victim-1.json", "out/victim-2.json"} {
		if err := f.store.Put(ctx, f.url(rel), []byte("result"), ""); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Put %s over a link: %v, want ErrNotAllowed", rel, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(f.root, "other/kept.json")); err != nil || string(b) != "kept" {
		t.Errorf("the link's target: %q, %v; want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "other/new.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling link's target was created (%v)", err)
	}
	// A link to a folder on the way is followed, as before.
	symlink(t, filepath.Join(f.root, "other"), filepath.Join(f.root, "via"))
	if err := f.store.Put(ctx, f.url("via/r.json"), []byte("r"), ""); err != nil {
		t.Errorf("Put through a link to a folder: %v", err)
	}
}

// TestFileDelete: Delete removes a regular file below a root it may write, is quiet about
// one that is not there, and refuses a link (never removing through it), a folder, or a
// path outside the roots.
func TestFileDelete(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	writeFile(t, filepath.Join(f.root, "out/a.png"), "overlay")
	if err := f.store.Delete(ctx, f.url("out/a.png")); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "out/a.png")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file is still there (%v)", err)
	}
	if err := f.store.Delete(ctx, f.url("out/a.png")); err != nil {
		t.Errorf("Delete of a missing file: %v, want nil", err)
	}
	writeFile(t, filepath.Join(f.root, "kept.png"), "kept")
	symlink(t, filepath.Join(f.root, "kept.png"), filepath.Join(f.root, "out/link.png"))
	symlink(t, filepath.Join(f.outside, "secret.jpg"), filepath.Join(f.root, "out/out.png"))
	for _, rel := range []string{"out/link.png", "out/out.png", "out"} {
		if err := f.store.Delete(ctx, f.url(rel)); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Delete %s: %v, want ErrNotAllowed", rel, err)
		}
	}
	if err := f.store.Delete(ctx, "file://"+filepath.Join(f.outside, "secret.jpg")); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Delete outside the roots: %v, want ErrNotAllowed", err)
	}
	for _, p := range []string{filepath.Join(f.root, "kept.png"), filepath.Join(f.outside, "secret.jpg")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it kept", p, err)
		}
	}
}
