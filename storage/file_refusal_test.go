package storage_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestFileRefusedPathsAnswerAlike: a path a caller may not read gets the same answer
// whether or not something is there (the same sentinel and, the path aside, the same
// message), so a job cannot probe for files outside what it may read: outside the roots,
// through a link out of them, in a hidden folder, in a denied folder below a root of "/".
func TestFileRefusedPathsAnswerAlike(t *testing.T) {
	f := newFileFixture(t)
	hidden := filepath.Join(f.root, "la-data/jetstream")
	writeFile(t, filepath.Join(hidden, "meta.inf"), "stream")
	symlink(t, filepath.Join(f.outside, "secret.jpg"), filepath.Join(f.root, "to-secret.jpg"))
	symlink(t, filepath.Join(f.outside, "missing.jpg"), filepath.Join(f.root, "to-missing.jpg"))
	s := openRouter(t, storage.Config{FileRoots: []string{f.root}, Hidden: []string{hidden}})
	everything := openRouter(t, storage.Config{FileRoots: []string{"/"}})
	ctx := context.Background()

	for _, c := range []struct {
		what            string
		store           *storage.Router
		exists, missing string
	}{
		{"outside the roots", s, filepath.Join(f.outside, "secret.jpg"), filepath.Join(f.outside, "missing.jpg")},
		{"a link out of the roots", s, filepath.Join(f.root, "to-secret.jpg"), filepath.Join(f.root, "to-missing.jpg")},
		{"a hidden folder", s, filepath.Join(hidden, "meta.inf"), filepath.Join(hidden, "missing.inf")},
		{"a denied folder", everything, "/etc/passwd", "/etc/no-such-file-here"},
	} {
		for _, op := range []struct {
			name string
			call func(*storage.Router, string) error
		}{
			{"Get", func(r *storage.Router, u string) error { _, err := r.Get(ctx, u, 0); return err }},
			{"Stat", func(r *storage.Router, u string) error { _, err := r.Stat(ctx, u); return err }},
		} {
			errExists := op.call(c.store, "file://"+c.exists)
			errMissing := op.call(c.store, "file://"+c.missing)
			if !errors.Is(errExists, storage.ErrNotAllowed) || !errors.Is(errMissing, storage.ErrNotAllowed) {
				t.Errorf("%s, %s: %v and %v; want ErrNotAllowed for both", c.what, op.name, errExists, errMissing)
				continue
			}
			a := strings.ReplaceAll(errExists.Error(), c.exists, "PATH")
			b := strings.ReplaceAll(errMissing.Error(), c.missing, "PATH")
			if a != b {
				t.Errorf("%s, %s: the answer tells an existing file from a missing one:\n%s\n%s", c.what, op.name, a, b)
			}
		}
	}
}

// TestFileOverLimitGivesNoSize: a file refused as too large is refused by the limit,
// without its size (which tells one file from another).
func TestFileOverLimitGivesNoSize(t *testing.T) {
	f := newFileFixture(t)
	writeFile(t, filepath.Join(f.root, "big.jpg"), strings.Repeat("x", 4321))
	_, err := f.store.Get(context.Background(), f.url("big.jpg"), 100)
	if !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("Get: %v, want ErrTooLarge", err)
	}
	if strings.Contains(err.Error(), "4321") {
		t.Errorf("the message gives the size: %v", err)
	}
}
