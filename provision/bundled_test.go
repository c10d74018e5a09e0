package provision_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/locateanything/detect/models"
	"github.com/locateanything/detect/provision"
)

func TestUnpackWritesTheEmbeddedModelOnceAndAtomically(t *testing.T) {
	dir := t.TempDir()
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths { // four workers starting at once
		wg.Go(func() {
			p, err := provision.Unpack(models.TinyShapes(), dir)
			if err != nil {
				t.Error(err)
			}
			paths[i] = p
		})
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("unpacked to %v: want one copy", paths)
		}
	}
	if filepath.Base(paths[0]) != "tiny-shapes" {
		t.Errorf("unpacked to %s: the directory names the model", paths[0])
	}
	// The copy is byte for byte the checkout's.
	src := filepath.Join("..", provision.BundledModel)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want, _ := os.ReadFile(filepath.Join(src, e.Name()))
		got, err := os.ReadFile(filepath.Join(paths[0], e.Name()))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: unpacked copy differs from the checkout's (%v)", e.Name(), err)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(paths[0]), ".unpack-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary directories left behind: %v", leftovers)
	}
	again, err := provision.Unpack(models.TinyShapes(), dir)
	if err != nil || again != paths[0] {
		t.Errorf("second unpack: %s, %v; want the same copy reused", again, err)
	}
}
