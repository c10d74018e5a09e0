package submit

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFiles creates files (with their folders) under dir; the content is the name, so
// every file is distinct.
func writeFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func images(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Image)
	}
	return out
}

func TestExpandDirectoryRecursesAndSelectsImages(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "b.jpg", "a.PNG", "notes.txt", "sub/c.jpeg", "sub/deeper/d.webp", "sub/e.gif", "sub/f.bmp")
	items, err := Expand(context.Background(), []string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.PNG", "b.jpg", "sub/c.jpeg", "sub/deeper/d.webp", "sub/e.gif"}
	for i := range want {
		want[i] = filepath.Join(dir, want[i])
	}
	if got := images(items); !slices.Equal(got, want) {
		t.Fatalf("images:\n got %q\nwant %q", got, want)
	}
}

func TestExpandFollowsLinksAndSurvivesLoops(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "frames/1.jpg", "frames/nested/2.jpg", "elsewhere/3.jpg")
	// A loop back to an ancestor, a link to itself, and a link to another folder.
	if err := os.Symlink("..", filepath.Join(dir, "frames/nested/up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("self", filepath.Join(dir, "frames/self")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(dir, "frames/other")); err != nil {
		t.Fatal(err)
	}
	items, err := Expand(context.Background(), []string{filepath.Join(dir, "frames")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := images(items)
	for _, name := range []string{"1.jpg", "2.jpg", "3.jpg"} {
		n := 0
		for _, g := range got {
			if filepath.Base(g) == name {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s found %d times in %q, want once", name, n, got)
		}
	}
}

func TestExpandBrokenImageLinkIsAnError(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "ok.jpg")
	if err := os.Symlink(filepath.Join(dir, "gone.jpg"), filepath.Join(dir, "broken.jpg")); err != nil {
		t.Fatal(err)
	}
	_, err := Expand(context.Background(), []string{dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "broken.jpg") {
		t.Fatalf("err = %v, want one naming broken.jpg", err)
	}
}

func TestExpandGlob(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "cam1/a.jpg", "cam2/b.jpg", "cam2/c.png", "other/d.jpg")
	items, err := Expand(context.Background(), []string{filepath.Join(dir, "cam*")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(items); got != 3 {
		t.Fatalf("%d items from cam*, want 3: %q", got, images(items))
	}
	items, err = Expand(context.Background(), []string{filepath.Join(dir, "*", "*.jpg")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(items); got != 3 {
		t.Fatalf("%d items from */*.jpg, want 3: %q", got, images(items))
	}
	_, err = Expand(context.Background(), []string{filepath.Join(dir, "nothing*")}, nil)
	if err == nil || !strings.Contains(err.Error(), "no file matches") {
		t.Fatalf("err = %v, want no file matches", err)
	}
}

func TestExpandMissingAndEmptyInputsAreErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "empty/readme.txt")
	for _, arg := range []string{filepath.Join(dir, "missing.jpg"), filepath.Join(dir, "empty"), ""} {
		if _, err := Expand(context.Background(), []string{arg}, nil); err == nil {
			t.Errorf("Expand(%q) succeeded, want an error", arg)
		}
	}
	_, err := Expand(context.Background(), []string{"s3://bucket/frames/"}, nil)
	if err == nil || !strings.Contains(err.Error(), "LA_S3_ENDPOINT") {
		t.Fatalf("s3 input without storage: err = %v, want a hint about LA_S3_ENDPOINT", err)
	}
}

func TestExpandExplicitFileWhateverItsExtension(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "frame.raw")
	items, err := Expand(context.Background(), []string{filepath.Join(dir, "frame.raw")}, nil)
	if err != nil || len(items) != 1 || !items[0].Local() {
		t.Fatalf("items %+v, err %v: want the one local file", items, err)
	}
}
