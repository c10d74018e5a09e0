package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// remove deletes the regular file p resolves to, in the folder resolve found (held open
// while it checks that the file is still the one resolved). Nothing there is no error; a
// link at p is refused rather than followed, like a folder or a special file.
func (s *fileStore) remove(_ context.Context, loc Location) error {
	t, err := s.resolve(loc.Path, s.writing)
	if errors.Is(err, ErrNotFound) {
		return nil // a path through a file: nothing to remove
	}
	if err != nil {
		return err
	}
	if t.link {
		return fmt.Errorf("%w: %s is a symbolic link; only regular files are removed", ErrNotAllowed, loc.Path)
	}
	if t.info == nil {
		return nil
	}
	if err := kindError(loc.Path, t.info, true); err != nil {
		return err
	}
	dir, err := s.openFolder(loc.Path, t.root, filepath.Dir(t.rel))
	if err != nil {
		return err
	}
	defer dir.Close()
	name := filepath.Base(t.rel)
	info, err := dir.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fileFailure(loc.Path, fmt.Errorf("remove: %w", err), true)
	}
	if !os.SameFile(info, t.info) {
		return fmt.Errorf("%s changed while it was being removed; try again", loc.Path)
	}
	if err := dir.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fileFailure(loc.Path, fmt.Errorf("remove: %w", err), true)
	}
	return nil
}
