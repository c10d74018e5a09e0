package storage_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

// fileFixture is a root directory with a sibling "outside" directory holding a secret that
// no file:// URL may reach.
type fileFixture struct {
	root, outside string
	store         *storage.Router
}

func newFileFixture(t *testing.T) fileFixture {
	t.Helper()
	base := t.TempDir()
	f := fileFixture{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	mkdir(t, f.root)
	mkdir(t, f.outside)
	writeFile(t, filepath.Join(f.outside, "secret.jpg"), "secret")
	f.store = openRouter(t, storage.Config{FileRoots: []string{f.root}})
	return f
}

func (f fileFixture) url(rel string) string { return "file://" + filepath.Join(f.root, rel) }

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	mkdir(t, filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestFilePutGetStat(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	data := readTestImage(t)
	u := f.url("results/cam04/000123.jpg") // folders are created
	if err := f.store.Put(ctx, u, data, "image/jpeg"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	obj, err := f.store.Stat(ctx, u)
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	want := storage.Object{URL: u, Size: int64(len(data)), ContentType: "image/jpeg"}
	if obj != want {
		t.Fatalf("Stat = %+v, want %+v", obj, want)
	}
	got, err := f.store.Get(ctx, u, 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %d bytes, %v; want the %d put", len(got), err, len(data))
	}
}

// TestFilePutIsAtomicAndLeavesNoTemporaries: a replaced file has the new content and the
// folder holds nothing but the file afterwards.
func TestFilePutIsAtomicAndLeavesNoTemporaries(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	u := f.url("out/r.json")
	for _, v := range []string{`{"first": "and longer"}`, `{"second": 2}`} {
		if err := f.store.Put(ctx, u, []byte(v), "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Join(f.root, "out/r.json"))
	if err != nil || string(got) != `{"second": 2}` {
		t.Fatalf("file holds %q, %v", got, err)
	}
	entries, err := os.ReadDir(filepath.Join(f.root, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("folder holds %q, want only r.json", names)
	}
}

func TestFileMissingIsNotFound(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	mkdir(t, filepath.Join(f.root, "adir"))
	for _, u := range []string{f.url("nope.jpg"), f.url("no/such/dir/x.jpg"), f.url("adir")} {
		if _, err := f.store.Stat(ctx, u); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Stat %s: %v, want ErrNotFound", u, err)
		}
		if _, err := f.store.Get(ctx, u, 0); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Get %s: %v, want ErrNotFound", u, err)
		}
	}
}

func TestFileOverLimit(t *testing.T) {
	f := newFileFixture(t)
	writeFile(t, filepath.Join(f.root, "big.bin"), strings.Repeat("x", 1001))
	if _, err := f.store.Get(context.Background(), f.url("big.bin"), 1000); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("Get over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := f.store.Get(context.Background(), f.url("big.bin"), 1001); err != nil {
		t.Fatalf("Get at exactly the limit: %v", err)
	}
}

// TestFileOverLimitWhileReading uses a file whose size lies: Linux reports 0 bytes for
// /proc files that hold text, so only the limit enforced while reading can catch it.
func TestFileOverLimitWhileReading(t *testing.T) {
	const status = "/proc/self/status"
	info, err := os.Stat(status)
	if err != nil || info.Size() != 0 {
		t.Skipf("needs Linux /proc with size-0 files (stat: %v)", err)
	}
	store := openRouter(t, storage.Config{FileRoots: []string{"/proc/self"}})
	if _, err := store.Get(context.Background(), "file://"+status, 10); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("Get of a file reporting 0 bytes but holding more than 10: %v, want ErrTooLarge", err)
	}
}

func TestFileConfinement(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	writeFile(t, filepath.Join(f.root, "ok/in.jpg"), "inside")
	symlink(t, filepath.Join(f.outside, "secret.jpg"), filepath.Join(f.root, "escape.jpg"))
	symlink(t, "../../outside/secret.jpg", filepath.Join(f.root, "ok/relative-escape.jpg"))
	symlink(t, f.outside, filepath.Join(f.root, "outdir"))
	symlink(t, "in.jpg", filepath.Join(f.root, "ok/alias.jpg")) // stays inside: allowed

	refused := map[string]error{
		"file://" + filepath.Join(f.outside, "secret.jpg"):     storage.ErrNotAllowed, // another directory
		"file://" + f.root + "/../outside/secret.jpg":          storage.ErrBadURL,     // ".." in the URL
		"file://" + f.root + "/ok/../../outside/secret.jpg":    storage.ErrBadURL,
		"file://" + f.root + "x/secret.jpg":                    storage.ErrNotAllowed, // a sibling sharing the name's start
		f.url("escape.jpg"):                                    storage.ErrNotAllowed, // link to an outside file
		f.url("ok/relative-escape.jpg"):                        storage.ErrNotAllowed, // relative link out
		f.url("outdir/secret.jpg"):                             storage.ErrNotAllowed, // through a linked folder
		"file://relative/path.jpg":                             storage.ErrBadURL,
		"file://" + strings.TrimPrefix(f.root, "/") + "/x.jpg": storage.ErrBadURL, // host part
	}
	for u, want := range refused {
		if _, err := f.store.Get(ctx, u, 0); !errors.Is(err, want) {
			t.Errorf("Get %s: %v, want %v", u, err, want)
		}
		if _, err := f.store.Stat(ctx, u); !errors.Is(err, want) {
			t.Errorf("Stat %s: %v, want %v", u, err, want)
		}
		if err := f.store.Put(ctx, u, []byte("overwritten"), ""); !errors.Is(err, want) {
			t.Errorf("Put %s: %v, want %v", u, err, want)
		}
	}
	// Put through the linked folder must not create anything outside either.
	if err := f.store.Put(ctx, f.url("outdir/new.jpg"), []byte("x"), ""); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Put of a new file through a link out: %v, want ErrNotAllowed", err)
	}
	if _, err := os.Stat(filepath.Join(f.outside, "new.jpg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file appeared outside the root: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(f.outside, "secret.jpg")); string(got) != "secret" {
		t.Errorf("the outside file was changed to %q", got)
	}

	got, err := f.store.Get(ctx, f.url("ok/alias.jpg"), 0)
	if err != nil || string(got) != "inside" {
		t.Errorf("Get through a link that stays inside = %q, %v", got, err)
	}
}

// TestFileRootReachedThroughALink: a root configured as a symbolic link (/data ->
// /mnt/data) serves URLs written with either name.
func TestFileRootReachedThroughALink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	writeFile(t, filepath.Join(real, "a.jpg"), "a")
	link := filepath.Join(base, "link")
	symlink(t, real, link)
	store := openRouter(t, storage.Config{FileRoots: []string{link}})
	for _, u := range []string{"file://" + link + "/a.jpg", "file://" + real + "/a.jpg"} {
		if got, err := store.Get(context.Background(), u, 0); err != nil || string(got) != "a" {
			t.Errorf("Get %s = %q, %v", u, got, err)
		}
	}
}

func TestFileOffUnlessConfigured(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jpg"), "a")
	store := openRouter(t, storage.Config{})
	ctx := context.Background()
	u := "file://" + filepath.Join(dir, "a.jpg")
	if _, err := store.Get(ctx, u, 0); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Get with no roots: %v, want ErrNotAllowed", err)
	}
	if _, err := store.Get(ctx, "s3://bucket/key.jpg", 0); !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("Get s3:// with no endpoint: %v, want ErrNotAllowed", err)
	}
}

func TestFileRootsMustBeAbsoluteExistingDirectories(t *testing.T) {
	for _, roots := range [][]string{{"relative/dir"}, {filepath.Join(t.TempDir(), "missing")}} {
		if _, err := storage.Open(storage.Config{FileRoots: roots, MaxImageBytes: 1 << 20}); err == nil {
			t.Errorf("Open with roots %q succeeded", roots)
		}
	}
}

func TestFileListInKeyOrder(t *testing.T) {
	f := newFileFixture(t)
	ctx := context.Background()
	for _, rel := range []string{"f/b.jpg", "f/a.jpg", "f/sub/c.jpg", "f-other/d.jpg", "g/e.jpg"} {
		writeFile(t, filepath.Join(f.root, rel), rel)
	}
	symlink(t, filepath.Join(f.outside, "secret.jpg"), filepath.Join(f.root, "f/escape.jpg"))
	symlink(t, "a.jpg", filepath.Join(f.root, "f/alias.jpg"))
	writeFile(t, filepath.Join(f.root, "f/.la-tmp-x.jpg-0123"), "half written")

	list := func(prefix string, limit int) []string {
		t.Helper()
		var got []string
		err := f.store.List(ctx, prefix, func(o storage.Object) bool {
			got = append(got, strings.TrimPrefix(o.URL, "file://"+f.root+"/"))
			return len(got) < limit
		})
		if err != nil {
			t.Fatalf("List %s: %v", prefix, err)
		}
		return got
	}
	cases := []struct {
		prefix string
		limit  int
		want   []string
	}{
		// '-' sorts before '/', so f-other comes before f/ as in an S3 listing.
		{f.url("f") + "/", 100, []string{"f/a.jpg", "f/alias.jpg", "f/b.jpg", "f/sub/c.jpg"}},
		{f.url("f"), 100, []string{"f-other/d.jpg", "f/a.jpg", "f/alias.jpg", "f/b.jpg", "f/sub/c.jpg"}},
		{f.url("f/a"), 100, []string{"f/a.jpg", "f/alias.jpg"}},
		{"file://" + f.root, 2, []string{"f-other/d.jpg", "f/a.jpg"}},
		{f.url("f/sub/c"), 100, []string{"f/sub/c.jpg"}},
		{f.url("f/a.jpg") + "/", 100, nil}, // a file is not a folder
		{f.url("missing") + "/", 100, nil},
	}
	for _, c := range cases {
		if got := list(c.prefix, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("List %s (stop after %d) = %q, want %q", c.prefix, c.limit, got, c.want)
		}
	}
	err := f.store.List(ctx, "file://"+f.outside+"/", func(storage.Object) bool { return true })
	if !errors.Is(err, storage.ErrNotAllowed) {
		t.Errorf("List outside the roots: %v, want ErrNotAllowed", err)
	}
}
