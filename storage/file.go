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
	"time"
	"unicode/utf8"
)

// fileStore serves file:// URLs below a set of root directories.
//
// Confinement has two layers. First, resolve follows every path itself, one component at
// a time, looking each up by Lstat through the os.Root of the root that holds it and
// walking each symbolic link's target (relative or absolute) in its place; a step outside
// every root ends it with ErrNotAllowed. Second, the file is then opened through the
// os.Root of the root that holds the place it resolved to, by that link-free path: os.Root
// cannot leave its root even if a link is swapped in meanwhile, and the file opened must
// be the one resolve found (same device and inode), or the call fails, transiently,
// instead of using it.
type fileStore struct {
	roots            []*fileRoot
	hidden           []string // resolved folders never served, whatever the roots
	reading, writing access
	swept            sweeper // when Put last removed orphan temporary files from each folder
}

// fileRoot is one configured directory. A path may name it as configured or as resolved
// (when the configured name is itself a symbolic link, e.g. /data -> /mnt/data).
type fileRoot struct {
	names    []string // the configured path and, if different, its resolved form
	resolved string
	root     *os.Root
	read     bool // below FileRoots: Stat, Get and List
	write    bool // below OutputRoots, or FileRoots when there are none: Put
}

// access is what a call does below a root.
type access struct {
	write    bool
	variable string // the setting that lists the roots allowing it, for messages
}

// allows reports whether r may be used for a.
func (a access) allows(r *fileRoot) bool {
	if a.write {
		return r.write
	}
	return r.read
}

// tempPrefix starts the names of files Put is still writing; List does not show them.
const tempPrefix = ".la-tmp-"

// newFileStore opens the roots: reads below fileRoots; writes below outputRoots, or below
// fileRoots when there are none. A directory in both lists is one root allowing both.
// Nothing in the hidden folders is served, whatever the roots.
func newFileStore(fileRoots, outputRoots, hidden []string) (*fileStore, error) {
	s := &fileStore{
		reading: access{variable: "LA_FILE_ROOTS"},
		writing: access{write: true, variable: "LA_FILE_ROOTS"},
	}
	separate := len(nonEmpty(outputRoots)) > 0
	if separate {
		s.writing.variable = "LA_OUTPUT_ROOTS"
	}
	add := func(variable string, dirs []string, read, write bool) error {
		for _, dir := range nonEmpty(dirs) {
			r, err := openFileRoot(variable, dir)
			if err != nil {
				return err
			}
			if same := s.sameRoot(r); same != nil {
				r.root.Close()
				same.read, same.write = same.read || read, same.write || write
				continue
			}
			r.read, r.write = read, write
			s.roots = append(s.roots, r)
		}
		return nil
	}
	err := add("LA_FILE_ROOTS", fileRoots, true, !separate)
	if err == nil {
		err = add("LA_OUTPUT_ROOTS", outputRoots, false, true)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	if len(s.roots) == 0 {
		return nil, nil
	}
	for _, h := range nonEmpty(hidden) {
		real, err := resolveHidden(h)
		if err != nil {
			s.close()
			return nil, err
		}
		s.hidden = append(s.hidden, real)
	}
	return s, nil
}

// sameRoot is the root already open on r's directory, if any.
func (s *fileStore) sameRoot(r *fileRoot) *fileRoot {
	for _, o := range s.roots {
		if o.resolved == r.resolved {
			for _, n := range r.names {
				if !slices.Contains(o.names, n) {
					o.names = append(o.names, n)
				}
			}
			return o
		}
	}
	return nil
}

func nonEmpty(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

func openFileRoot(variable, dir string) (*fileRoot, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%s: %q is not an absolute path", variable, dir)
	}
	dir = filepath.Clean(dir)
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %q must be an existing directory: %w", variable, dir, err)
	}
	root, err := os.OpenRoot(resolved)
	if err != nil {
		return nil, fmt.Errorf("%s: open %q: %w", variable, dir, err)
	}
	names := []string{dir}
	if resolved != dir {
		names = append(names, resolved)
	}
	return &fileRoot{names: names, resolved: resolved, root: root}, nil
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

// regular resolves p for a read and refuses anything but an existing regular file.
func (s *fileStore) regular(p string) (resolved, error) {
	t, err := s.resolve(p, s.reading)
	if err != nil {
		return resolved{}, err
	}
	if t.info == nil {
		return resolved{}, fmt.Errorf("%w: %s does not exist", ErrNotFound, p)
	}
	if err := kindError(p, t.info, false); err != nil {
		return resolved{}, err
	}
	if err := hardLinkError(p, t.info); err != nil {
		return resolved{}, err
	}
	return t, nil
}

func (s *fileStore) stat(_ context.Context, loc Location) (Object, error) {
	t, err := s.regular(loc.Path)
	if err != nil {
		return Object{}, err
	}
	return fileObject(loc.Path, t.info.Size()), nil
}

func fileObject(p string, size int64) Object {
	return Object{URL: "file://" + p, Size: size, ContentType: mime.TypeByExtension(path.Ext(p))}
}

// get opens the regular file p resolves to without blocking (a FIFO swapped in after the
// check opens at once, and is then refused as not the file resolved), checks that it is
// that file and its size, then reads at most maxBytes+1 bytes, so a file that grows while
// being read is refused as well.
func (s *fileStore) get(_ context.Context, loc Location, maxBytes int64) ([]byte, error) {
	t, err := s.regular(loc.Path)
	if err != nil {
		return nil, err
	}
	f, err := t.root.root.OpenFile(t.rel, openReadFlags, 0)
	if err != nil {
		return nil, fileFailure(loc.Path, err, false)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", loc.Path, err)
	}
	if !os.SameFile(info, t.info) {
		return nil, fmt.Errorf("%s changed while it was being opened; try again", loc.Path)
	}
	if err := hardLinkError(loc.Path, info); err != nil {
		return nil, err // a name added since the check
	}
	if info.Size() > maxBytes {
		// Not the size itself: the message reaches whoever named the file.
		return nil, fmt.Errorf("%w: over the limit of %d bytes", ErrTooLarge, maxBytes)
	}
	data, err := readLimited(f, maxBytes)
	if err != nil && !errors.Is(err, ErrTooLarge) {
		return nil, fileFailure(loc.Path, err, false)
	}
	return data, err
}

// put writes to a temporary file next to the target and renames it into place, so a reader
// sees the old file or the new one, never a part. The content type is not stored. The
// target's folder is created, resolved again and held open (an os.Root on it) while the
// file is written, so the writing happens in the folder that was checked; temporary files
// that writers killed mid-Put left there are removed first (file_temp.go). The target is
// checked once more in that folder: a FIFO, device or folder in its place is refused,
// never written into or replaced.
func (s *fileStore) put(_ context.Context, loc Location, data []byte) error {
	t, err := s.resolve(loc.Path, s.writing)
	if err != nil {
		return err
	}
	if t.rel == "." {
		return fmt.Errorf("%w: %s is a root directory, not a file", ErrNotAllowed, loc.Path)
	}
	if t.link {
		return fmt.Errorf("%w: %s is a symbolic link; a file is never written through one", ErrNotAllowed, loc.Path)
	}
	if t.info != nil {
		if err := kindError(loc.Path, t.info, true); err != nil {
			return err
		}
	}
	dirRel, name := filepath.Dir(t.rel), filepath.Base(t.rel)
	if err := makeFolders(loc.Path, t.root.root, dirRel); err != nil {
		return err
	}
	dir, err := s.openFolder(loc.Path, t.root, dirRel)
	if err != nil {
		return err
	}
	defer dir.Close()
	if now := time.Now(); s.swept.due(filepath.Join(t.root.resolved, dirRel), now) {
		_ = sweepTemps(dir, now) // best effort: what it leaves, a later sweep removes
	}
	if info, err := dir.Lstat(name); err == nil {
		if info.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s changed while it was being written; try again", loc.Path)
		}
		if err := kindError(loc.Path, info, true); err != nil {
			return err
		}
	}
	tmp := tempName(name)
	if err := writeSynced(dir, tmp, data); err != nil {
		_ = dir.Remove(tmp)
		return fileFailure(loc.Path, fmt.Errorf("write: %w", err), true)
	}
	if err := dir.Rename(tmp, name); err != nil {
		_ = dir.Remove(tmp)
		return fileFailure(loc.Path, fmt.Errorf("write: %w", err), true)
	}
	return nil
}

// openFolder opens the folder dirRel of root r, which must be what the resolved path of
// that folder is now: resolved again, it must be the same link-free place, and the folder
// opened must be the one resolve found.
func (s *fileStore) openFolder(p string, r *fileRoot, dirRel string) (*os.Root, error) {
	want := filepath.Join(r.resolved, dirRel)
	t, err := s.resolve(want, s.writing)
	if err != nil {
		return nil, err
	}
	if t.root != r || t.rel != dirRel || t.info == nil || !t.info.IsDir() {
		return nil, fmt.Errorf("%s: folder %s changed while it was being written; try again", p, want)
	}
	dir, err := r.root.OpenRoot(dirRel)
	if err != nil {
		return nil, fileFailure(p, fmt.Errorf("open folder: %w", err), true)
	}
	info, err := dir.Stat(".")
	if err != nil || !os.SameFile(info, t.info) {
		dir.Close()
		return nil, fmt.Errorf("%s: folder %s changed while it was being written; try again", p, want)
	}
	return dir, nil
}

// tempName is a fresh name for the temporary file of a Put of name: the prefix, name cut
// to at most 100 bytes (so the whole stays within a file name's 255), and a random part.
func tempName(name string) string {
	if len(name) > 100 {
		cut := 100
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut]
	}
	return tempPrefix + name + "-" + randomSuffix()
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
// files are followed as Get follows them, and listed when Get would serve them; links to
// folders are not followed. Files Put is still writing are not listed.
func (s *fileStore) list(ctx context.Context, loc Location, fn func(Object) bool) error {
	prefix := loc.Path
	dir := path.Dir(prefix)
	if strings.HasSuffix(prefix, "/") {
		dir = strings.TrimSuffix(prefix, "/")
	} else if _, rel, err := s.locate(prefix, s.reading); err == nil && rel == "." {
		dir = prefix // the prefix is a root itself
	}
	if dir == "" {
		dir = "/"
	}
	t, err := s.resolve(dir, s.reading)
	if errors.Is(err, ErrNotFound) {
		return nil // a path through a file holds no objects
	}
	if err != nil {
		return err
	}
	if t.info == nil || !t.info.IsDir() {
		return nil // an absent folder, or a file where the prefix wants a folder
	}
	start := filepath.ToSlash(t.rel)
	var objs []Object
	walkErr := fs.WalkDir(t.root.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // removed meanwhile: it holds no objects
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == start {
			return nil // the folder itself
		}
		below := p
		if start != "." {
			below = strings.TrimPrefix(p, start+"/")
		}
		full := path.Join(dir, below) // as the caller named it, not as resolved
		if d.IsDir() {
			if _, bad := s.refused(filepath.Join(t.root.resolved, filepath.FromSlash(p)), t.root); bad {
				return fs.SkipDir // /proc and the like below a root of "/", a hidden folder
			}
			if !strings.HasPrefix(full+"/", prefix) && !strings.HasPrefix(prefix, full+"/") {
				return fs.SkipDir // nothing below can match the prefix
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), tempPrefix) || !strings.HasPrefix(full, prefix) {
			return nil
		}
		var info fs.FileInfo
		if d.Type()&fs.ModeSymlink != 0 {
			lt, err := s.resolve(filepath.Join(t.root.resolved, filepath.FromSlash(p)), s.reading)
			if err != nil || lt.info == nil {
				return nil // a dangling link, or one out of the roots: not an object
			}
			info = lt.info
		} else if info, err = d.Info(); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if !info.Mode().IsRegular() || hardLinkError(full, info) != nil {
			return nil // a device, a socket, a FIFO, a link to a folder, a file with other names
		}
		objs = append(objs, fileObject(full, info.Size()))
		return nil
	})
	if walkErr != nil {
		if ctx.Err() != nil {
			return walkErr
		}
		return fileFailure(dir, walkErr, false)
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.URL, b.URL) })
	for _, o := range objs {
		if !fn(o) {
			return nil
		}
	}
	return nil
}
