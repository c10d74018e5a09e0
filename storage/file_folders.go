package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// fileExtensions are the endings of the files a worker writes for a job: its result
// (<id>.json, and <id>.job.json for a dead-letter record's job), its overlay (<id>.png,
// <id>.jpg).
var fileExtensions = [...]string{".json", ".png", ".jpg", ".jpeg"}

// FileLikeName reports whether name, one segment of a path or key, is shaped like a file a
// worker writes: it ends in .json, .png, .jpg or .jpeg (in any case), or it is a temporary
// file of a Put (.la-tmp-*). Put never creates a folder so named, and never writes below
// such a key prefix on S3: a folder named victim-1.json would take the place of the
// result of job victim-1.
func FileLikeName(name string) bool {
	if strings.HasPrefix(name, tempPrefix) {
		return true
	}
	lower := strings.ToLower(name)
	for _, ext := range fileExtensions {
		if strings.HasSuffix(lower, ext) && len(lower) > len(ext) {
			return true
		}
	}
	return false
}

// makeFolders creates the folders of rel (a link-free path below root) that do not exist,
// one at a time, refusing with ErrNotAllowed to create one whose name is shaped like a file
// (FileLikeName). Folders that exist already are used whatever their names: the operator
// made them. p is the URL's path, for messages.
func makeFolders(p string, root *os.Root, rel string) error {
	if rel == "." {
		return nil
	}
	cur := ""
	for _, name := range strings.Split(filepath.ToSlash(rel), "/") {
		cur = path.Join(cur, name)
		_, err := root.Lstat(cur)
		if err == nil {
			continue // exists; openFolder checks that it is a folder
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fileFailure(p, fmt.Errorf("create folder: %w", err), true)
		}
		if FileLikeName(name) {
			return fmt.Errorf("%w: %s: will not create a folder named %q: a file a worker writes (a result, an overlay) "+
				"may have that name", ErrNotAllowed, p, name)
		}
		if err := root.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fileFailure(p, fmt.Errorf("create folder: %w", err), true)
		}
	}
	return nil
}
