package config_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// outsideReferences are names of documents and folders that live beside the repository in
// its development workspace, and that workspace's own directory (/work/), not in it;
// docs/background.md restates what the project takes from them.
var outsideReferences = []string{"SERVING.md", "LOCATE_ANYTHING.md", "DESIGN.md", "/work/", "../shared/"}

// TestNoReferenceOutsideTheRepository: the repository stands on its own.
func TestNoReferenceOutsideTheRepository(t *testing.T) {
	root := ".."
	self := filepath.Join("config", "selfcontained_test.go")
	devPaths := filepath.Join("tools", "devpaths_test.go") // lists such paths to refuse them
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// what builds, make run, make demo, the quick start and make dist write (ignored)
			output := map[string]bool{"bin": true, "la-data": true, "demo-out": true, "la-out": true, "dist": true}
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || output[d.Name()]) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == ".git" {
			return nil // a worktree's pointer to its repository, not the repository's content
		}
		info, err := d.Info()
		if err != nil || info.Size() > 4<<20 || rel == self || rel == devPaths {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(data, 0) >= 0 {
			return nil // binary
		}
		for _, ref := range outsideReferences {
			if bytes.Contains(data, []byte(ref)) {
				t.Errorf("%s names %q, which is outside the repository (point at docs/background.md)", rel, ref)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
