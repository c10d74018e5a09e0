package config_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// eachGoSource calls fn with the path (relative to the repository root) and text of every
// non-test Go file of the repository, hidden folders and testdata left out: what the
// tests that hold every package to a rule of the settings read.
func eachGoSource(t *testing.T, fn func(rel, src string)) {
	t.Helper()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			if rel != "." && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fn(rel, string(src))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
