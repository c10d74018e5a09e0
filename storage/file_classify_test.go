package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestFileErrorsThatNeverGoAwayArePermanent: the file:// failures a retry cannot fix.
func TestFileErrorsThatNeverGoAwayArePermanent(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	writeFile(t, filepath.Join(f.root, "hostname"), "box")
	mkdir(t, filepath.Join(f.root, "adir"))

	long := f.url(strings.Repeat("d/", 2500) + "x.jpg") // 5000+ characters
	_, err := f.store.Get(ctx, long, 0)
	wantPermanent(t, "Get of a 5000-character path", err, storage.ErrBadURL)
	wantPermanent(t, "Put of a 5000-character path", f.store.Put(ctx, long, []byte("x"), ""), storage.ErrBadURL)
	longName := f.url(strings.Repeat("n", 300) + ".jpg")
	_, err = f.store.Get(ctx, longName, 0)
	wantPermanent(t, "Get of a 300-byte file name", err, storage.ErrBadURL)

	// An output path under a regular file (file:///etc/hostname/x/ on a real system).
	err = f.store.Put(ctx, f.url("hostname/x/r.json"), []byte("x"), "")
	wantPermanent(t, "Put under a regular file", err, storage.ErrNotAllowed)
	_, err = f.store.Get(ctx, f.url("hostname/x.jpg"), 0)
	wantPermanent(t, "Get under a regular file", err, storage.ErrNotFound)
	// A folder where the result file should go.
	wantPermanent(t, "Put onto a folder", f.store.Put(ctx, f.url("adir"), []byte("x"), ""), storage.ErrNotAllowed)
	_, err = f.store.Get(ctx, f.url("adir"), 0)
	wantPermanent(t, "Get of a folder", err, storage.ErrNotFound)
	wantPermanent(t, "Put onto a root", f.store.Put(ctx, "file://"+f.root, []byte("x"), ""), storage.ErrNotAllowed)

	_, err = f.store.Get(ctx, "file://"+filepath.Join(f.outside, "secret.jpg"), 0)
	wantPermanent(t, "Get outside the roots", err, storage.ErrNotAllowed)
	_, err = f.store.Get(ctx, "gs://b/k", 0)
	wantPermanent(t, "Get with an unknown scheme", err, storage.ErrBadURL)
	_, err = f.store.Get(ctx, "s3://images/a.jpg", 0)
	wantPermanent(t, "Get s3:// with no endpoint", err, storage.ErrNotAllowed)
	writeFile(t, filepath.Join(f.root, "big.bin"), "0123456789")
	_, err = f.store.Get(ctx, f.url("big.bin"), 5)
	wantPermanent(t, "Get over the limit", err, storage.ErrTooLarge)
}

// TestFileAccessDeniedIsPermanent: a file or folder the worker's user may not read or
// write. Root may do anything, so this needs an ordinary user.
func TestFileAccessDeniedIsPermanent(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: permissions are not enforced")
	}
	f := newFileFixture(t)
	ctx := context.Background()
	writeFile(t, filepath.Join(f.root, "locked.jpg"), "x")
	mkdir(t, filepath.Join(f.root, "ro"))
	if err := os.Chmod(filepath.Join(f.root, "locked.jpg"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(f.root, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(f.root, "ro"), 0o755) })
	_, err := f.store.Get(ctx, f.url("locked.jpg"), 0)
	wantPermanent(t, "Get of an unreadable file", err, storage.ErrAccessDenied)
	err = f.store.Put(ctx, f.url("ro/r.json"), []byte("x"), "")
	wantPermanent(t, "Put into a read-only folder", err, storage.ErrAccessDenied)
}

// TestFilePutOfALongName: a name near the 255-byte limit is written, although its
// temporary file carries the name too.
func TestFilePutOfALongName(t *testing.T) {
	f := newFileFixture(t)
	name := strings.Repeat("é", 100) + strings.Repeat("n", 50) + ".json" // 255 bytes
	if err := f.store.Put(context.Background(), f.url("out/"+name), []byte("{}"), ""); err != nil {
		t.Fatalf("Put of a %d-byte name: %v", len(name), err)
	}
	if got, err := os.ReadFile(filepath.Join(f.root, "out", name)); err != nil || string(got) != "{}" {
		t.Fatalf("the file holds %q, %v", got, err)
	}
}
