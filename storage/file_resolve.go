package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symbolic links one path may pass through, as Linux does.
const maxLinks = 40

// resolved is where a file:// path leads once every symbolic link on it is followed: the
// root that serves that place and the link-free path below it.
type resolved struct {
	root *fileRoot
	rel  string      // below root.resolved; "." for the root itself
	info fs.FileInfo // Lstat of the place; nil when it does not exist (yet)
}

// path is the resolved absolute path.
func (t resolved) path() string { return filepath.Join(t.root.resolved, t.rel) }

// locate finds the root that p, as written in a URL, lies in (by its configured or its
// resolved name; the most specific root when several hold p) and p's path below it.
func (s *fileStore) locate(p string) (*fileRoot, string, error) {
	var best *fileRoot
	var bestRel string
	bestLen := -1
	for _, r := range s.roots {
		for _, name := range r.names {
			if rel, ok := within(name, p); ok && len(name) > bestLen {
				best, bestRel, bestLen = r, rel, len(name)
			}
		}
	}
	if best == nil {
		return nil, "", fmt.Errorf("%w: %s is outside the file roots (LA_FILE_ROOTS)", ErrNotAllowed, p)
	}
	return best, bestRel, nil
}

// serving finds the root that holds the resolved path real (the most specific one) and
// real's path below it.
func (s *fileStore) serving(real string) (*fileRoot, string, bool) {
	var best *fileRoot
	var bestRel string
	for _, r := range s.roots {
		if rel, ok := within(r.resolved, real); ok && (best == nil || len(r.resolved) > len(best.resolved)) {
			best, bestRel = r, rel
		}
	}
	return best, bestRel, best != nil
}

// leadsToRoot reports whether the resolved path real is a folder above some root: a real
// folder (a root's resolved path has no links), so a path may pass through it on its way
// into that root without it being served itself.
func (s *fileStore) leadsToRoot(real string) bool {
	for _, r := range s.roots {
		if rel, ok := within(real, r.resolved); ok && rel != "." {
			return true
		}
	}
	return false
}

// resolve follows p (an absolute, clean path from a URL) one component at a time, as the
// kernel would, but with every lookup done by Lstat through the os.Root of the root that
// holds the component, and every symbolic link's target, relative or absolute, read and
// walked in its place. It fails with ErrNotAllowed as soon as the walk steps outside
// every root, or after maxLinks links. A path whose tail does not exist resolves to where
// that tail would be created (info nil). write picks how a file where a folder is needed
// is reported: ErrNotFound for a read, ErrNotAllowed for a write.
func (s *fileStore) resolve(p string, write bool) (resolved, error) {
	start, rel, err := s.locate(p)
	if err != nil {
		return resolved{}, err
	}
	cur := start.resolved // resolved so far: an existing folder with no link on its path
	var curInfo fs.FileInfo
	todo := rel
	if todo == "." {
		todo = ""
	}
	links := 0
	outside := func() error {
		if links == 0 {
			return fmt.Errorf("%w: %s is outside the file roots (LA_FILE_ROOTS)", ErrNotAllowed, p)
		}
		return fmt.Errorf("%w: %s leads outside the file roots (LA_FILE_ROOTS) through a symbolic link", ErrNotAllowed, p)
	}
	for todo != "" {
		var c string
		c, todo, _ = strings.Cut(todo, "/")
		switch c {
		case "", ".":
			continue
		case "..":
			cur, curInfo = filepath.Dir(cur), nil
			continue
		}
		next := filepath.Join(cur, c)
		if todo != "" && s.leadsToRoot(next) {
			cur, curInfo = next, nil
			continue
		}
		r, nextRel, ok := s.serving(next)
		if !ok {
			return resolved{}, outside()
		}
		info, err := r.root.Lstat(nextRel)
		if errors.Is(err, fs.ErrNotExist) {
			return s.missing(p, next, todo, outside)
		}
		if err != nil {
			return resolved{}, fileFailure(p, fmt.Errorf("resolve: %w", err), write)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return resolved{}, fmt.Errorf("%w: %s: more than %d symbolic links (a loop?)", ErrNotAllowed, p, maxLinks)
			}
			target, err := r.root.Readlink(nextRel)
			if err != nil {
				return resolved{}, fileFailure(p, fmt.Errorf("resolve: %w", err), write)
			}
			if filepath.IsAbs(target) {
				cur, curInfo = "/", nil
			}
			todo = strings.TrimSuffix(filepath.ToSlash(target)+"/"+todo, "/")
			continue
		}
		if todo != "" && !info.IsDir() {
			return resolved{}, fileFailure(p, fmt.Errorf("resolve: %s: %w", next, syscall.ENOTDIR), write)
		}
		cur, curInfo = next, info
	}
	r, curRel, ok := s.serving(cur)
	if !ok {
		return resolved{}, outside()
	}
	if curInfo == nil { // the root itself, or a folder reached by ".." or on the way in
		if curInfo, err = r.root.Lstat(curRel); err != nil {
			return resolved{}, fileFailure(p, fmt.Errorf("resolve: %w", err), write)
		}
	}
	return resolved{root: r, rel: curRel, info: curInfo}, nil
}

// missing resolves a path whose component next does not exist: next and the rest of the
// path (todo) are where a Put would create them. A ".." in what is left (from a link's
// target) would climb out of a folder that is not there: not found.
func (s *fileStore) missing(p, next, todo string, outside func() error) (resolved, error) {
	for _, c := range strings.Split(todo, "/") {
		if c == ".." {
			return resolved{}, fmt.Errorf("%w: %s: a symbolic link leads through %s, which does not exist", ErrNotFound, p, next)
		}
	}
	full := filepath.Join(next, todo)
	r, rel, ok := s.serving(full)
	if !ok {
		return resolved{}, outside()
	}
	return resolved{root: r, rel: rel}, nil
}

// fileFailure wraps err, from a file system call made for path p, in the sentinel that
// classifies it. write tells a Put's calls from a read's: a missing file is permanent for
// a read, while for a write it can only be a folder removed meanwhile (retried).
func fileFailure(p string, err error, write bool) error {
	var sentinel error
	reason := ""
	switch {
	case errors.Is(err, syscall.ENAMETOOLONG):
		sentinel = ErrBadURL
	case errors.Is(err, syscall.ENOTDIR):
		sentinel, reason = ErrNotFound, "a part of the path is a file, not a folder"
		if write {
			sentinel = ErrNotAllowed
		}
	case errors.Is(err, syscall.EISDIR):
		sentinel, reason = ErrNotFound, "a folder, not a file"
		if write {
			sentinel = ErrNotAllowed
		}
	case errors.Is(err, syscall.ELOOP):
		sentinel, reason = ErrNotAllowed, "too many symbolic links"
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		sentinel = ErrAccessDenied
	case errors.Is(err, fs.ErrNotExist) && !write:
		sentinel = ErrNotFound
	default:
		return fmt.Errorf("%s: %w", p, err) // disk trouble, a race with another writer: transient
	}
	if reason != "" {
		return fmt.Errorf("%w: %s: %s: %w", sentinel, p, reason, err)
	}
	return fmt.Errorf("%w: %s: %w", sentinel, p, err)
}

// kindError refuses a resolved place that is not a regular file: a folder is not found
// for a read and not allowed for a write; a FIFO, socket or device is never opened (a FIFO
// would block the open until a writer came, a device could be endless or have effects).
func kindError(p string, info fs.FileInfo, write bool) error {
	m := info.Mode()
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir() && !write:
		return fmt.Errorf("%w: %s is a folder, not a file", ErrNotFound, p)
	case m.IsDir():
		return fmt.Errorf("%w: %s is a folder, not a file", ErrNotAllowed, p)
	}
	return fmt.Errorf("%w: %s is a %s, not a regular file", ErrNotAllowed, p, kindName(m))
}

func kindName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}
