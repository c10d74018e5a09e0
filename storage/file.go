package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// fileStore serves file:// URLs below a set of root directories.
//
// Confinement has two layers. First, every path is checked lexically (no "..", absolute,
// clean, below a root) and with filepath.EvalSymlinks, so a symbolic link that leads out of
// its root is refused with ErrNotAllowed and a message saying so. Second, every file system
// call goes through an os.Root opened on the root directory, which resolves each path
// component itself and refuses to leave the root, so a link swapped in between the check
// and the call cannot escape either.
type fileStore struct {
	roots []fileRoot
}

// fileRoot is one configured directory. A path may name it as configured or as resolved
// (when the configured name is itself a symbolic link, e.g. /data -> /mnt/data).
type fileRoot struct {
	names    []string // the configured path and, if different, its resolved form
	resolved string
	root     *os.Root
}

// tempPrefix starts the names of files Put is still writing; List does not show them.
const tempPrefix = ".la-tmp-"

func newFileStore(dirs []string) (*fileStore, error) {
	s := &fileStore{}
	for _, dir := range dirs {
		dir = strings.TrimSpace(dir)
		if dir == "" {
			continue
		}
		r, err := openFileRoot(dir)
		if err != nil {
			s.close()
			return nil, err
		}
		s.roots = append(s.roots, r)
	}
	if len(s.roots) == 0 {
		return nil, nil
	}
	return s, nil
}

func openFileRoot(dir string) (fileRoot, error) {
	if !filepath.IsAbs(dir) {
		return fileRoot{}, fmt.Errorf("LA_FILE_ROOTS: %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fileRoot{}, fmt.Errorf("LA_FILE_ROOTS: %q must be an existing directory: %w", dir, err)
	}
	root, err := os.OpenRoot(resolved)
	if err != nil {
		return fileRoot{}, fmt.Errorf("LA_FILE_ROOTS: open %q: %w", dir, err)
	}
	names := []string{dir}
	if resolved != dir {
		names = append(names, resolved)
	}
	return fileRoot{names: names, resolved: resolved, root: root}, nil
}

func (s *fileStore) close() error {
	var errs []error
	for _, r := range s.roots {
		errs = append(errs, r.root.Close())
	}
	return errors.Join(errs...)
}

// within reports the path of p relative to dir when p is dir or below it.
func within(dir, p string) (string, bool) {
	if p == dir {
		return ".", true
	}
	if dir == "/" {
		return p[1:], true
	}
	if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
		return rest, true
	}
	return "", false
}

// locate finds the root p lies in and p's path relative to it.
func (s *fileStore) locate(p string) (*fileRoot, string, error) {
	for i := range s.roots {
		for _, name := range s.roots[i].names {
			if rel, ok := within(name, p); ok {
				return &s.roots[i], rel, nil
			}
		}
	}
	return nil, "", fmt.Errorf("%w: %s is outside the file roots (LA_FILE_ROOTS)", ErrNotAllowed, p)
}

// checkLinks resolves the symbolic links on p (as far as p exists) and refuses a path that
// ends up outside the root.
func (r *fileRoot) checkLinks(rel string) error {
	full := filepath.Join(r.resolved, rel)
	existing, missing := full, ""
	for {
		resolved, err := filepath.EvalSymlinks(existing)
		if err == nil {
			if _, ok := within(r.resolved, filepath.Join(resolved, missing)); !ok {
				return fmt.Errorf("%w: %s leads outside its root %s through a symbolic link", ErrNotAllowed, full, r.resolved)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("resolve %s: %w", full, err)
		}
		if existing == r.resolved {
			return fmt.Errorf("root %s: %w", r.resolved, err)
		}
		missing = filepath.Join(filepath.Base(existing), missing)
		existing = filepath.Dir(existing)
	}
}

// open checks p and returns its root and relative path, ready for an os.Root call.
func (s *fileStore) open(p string) (*fileRoot, string, error) {
	r, rel, err := s.locate(p)
	if err != nil {
		return nil, "", err
	}
	if err := r.checkLinks(rel); err != nil {
		return nil, "", err
	}
	return r, rel, nil
}

func (s *fileStore) stat(_ context.Context, loc Location) (Object, error) {
	r, rel, err := s.open(loc.Path)
	if err != nil {
		return Object{}, err
	}
	info, err := r.root.Stat(rel)
	if err != nil {
		return Object{}, classifyFile(err)
	}
	if !info.Mode().IsRegular() {
		return Object{}, fmt.Errorf("%w: %s is not a regular file", ErrNotFound, loc.Path)
	}
	return fileObject(loc.Path, info.Size()), nil
}

func fileObject(p string, size int64) Object {
	return Object{URL: "file://" + p, Size: size, ContentType: mime.TypeByExtension(path.Ext(p))}
}

// get checks the size of the opened file, then reads at most maxBytes+1 bytes, so a file
// that grows while being read is refused as well.
func (s *fileStore) get(_ context.Context, loc Location, maxBytes int64) ([]byte, error) {
	r, rel, err := s.open(loc.Path)
	if err != nil {
		return nil, err
	}
	f, err := r.root.Open(rel)
	if err != nil {
		return nil, classifyFile(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", loc.Path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrNotFound, loc.Path)
	}
	if info.Size() > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, info.Size(), maxBytes)
	}
	return readLimited(f, maxBytes)
}

// put writes to a temporary file next to the target and renames it into place, so a reader
// sees the old file or the new one, never a part. The content type is not stored.
func (s *fileStore) put(_ context.Context, loc Location, data []byte) error {
	r, rel, err := s.open(loc.Path)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: %s is a root directory, not a file", ErrNotAllowed, loc.Path)
	}
	dir := filepath.Dir(rel)
	if err := r.root.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create folder for %s: %w", loc.Path, err)
	}
	tmp := filepath.Join(dir, tempPrefix+filepath.Base(rel)+"-"+randomSuffix())
	if err := writeSynced(r.root, tmp, data); err != nil {
		_ = r.root.Remove(tmp)
		return fmt.Errorf("write %s: %w", loc.Path, err)
	}
	if err := r.root.Rename(tmp, rel); err != nil {
		_ = r.root.Remove(tmp)
		return fmt.Errorf("write %s: %w", loc.Path, err)
	}
	return nil
}

// writeSynced creates name (which must not exist), writes data and flushes it to disk, so
// the rename that follows never publishes a file whose bytes are still in flight.
func writeSynced(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux and panics rather than return short
	return hex.EncodeToString(b)
}

// list walks the folder the prefix names (or the folder holding a partial name) and calls
// fn for the regular files whose URL starts with the prefix, in URL (key) order. Links to
// files are followed when they stay inside the root; others are not listed, as Get would
// refuse them. Files Put is still writing are not listed.
func (s *fileStore) list(ctx context.Context, loc Location, fn func(Object) bool) error {
	prefix := loc.Path
	dir := path.Dir(prefix)
	if strings.HasSuffix(prefix, "/") {
		dir = strings.TrimSuffix(prefix, "/")
	} else if _, rel, err := s.locate(prefix); err == nil && rel == "." {
		dir = prefix // the prefix is a root itself
	}
	if dir == "" {
		dir = "/"
	}
	r, rel, err := s.open(dir)
	if err != nil {
		return err
	}
	start := filepath.ToSlash(rel)
	var objs []Object
	walkErr := fs.WalkDir(r.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // an absent folder holds no objects
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == start {
			return nil // the folder itself (or a file where the prefix wants a folder)
		}
		below := p
		if start != "." {
			below = strings.TrimPrefix(p, start+"/")
		}
		full := path.Join(dir, below) // as the caller named it, not as resolved
		if d.IsDir() {
			if !strings.HasPrefix(full+"/", prefix) && !strings.HasPrefix(prefix, full+"/") {
				return fs.SkipDir // nothing below can match the prefix
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), tempPrefix) || !strings.HasPrefix(full, prefix) {
			return nil
		}
		info, err := r.root.Stat(p) // follows a link, but only inside the root
		if err != nil {
			if d.Type()&fs.ModeSymlink != 0 {
				return nil // a dangling link, or one out of the root: not an object
			}
			return err
		}
		if !info.Mode().IsRegular() {
			return nil // a device, a socket, a link to a folder
		}
		objs = append(objs, fileObject(full, info.Size()))
		return nil
	})
	if walkErr != nil {
		return walkErr
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.URL, b.URL) })
	for _, o := range objs {
		if !fn(o) {
			return nil
		}
	}
	return nil
}

// classifyFile maps a missing file to ErrNotFound; other errors pass through as is.
func classifyFile(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
