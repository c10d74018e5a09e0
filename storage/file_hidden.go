package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// resolveHidden is the resolved form of the hidden folder dir (Config.Hidden), which need
// not exist yet (the JetStream store is made after the store opens): the longest part of
// it that exists is resolved, links included, and the rest joined to it as written.
func resolveHidden(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("hidden folder %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	rest := ""
	for cur := dir; ; cur = filepath.Dir(cur) {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || cur == "/" {
			return "", fmt.Errorf("hidden folder %q: %w", dir, err)
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}
