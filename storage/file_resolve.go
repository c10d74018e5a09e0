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
	// link is set when the path's last name is a symbolic link (followed to info): a Put
	// never writes through one.
	link bool
}

// path is the resolved absolute path.
func (t resolved) path() string { return filepath.Join(t.root.resolved, t.rel) }

// denied reports the denied folder that the resolved path real lies in, unless r (the root
// serving it) is that folder or lies below it.
//
// The denied folders are never served through file://, whatever the roots: system
// configuration and secrets, kernel interfaces, devices and runtime sockets. A root that
// names one of them, or a folder below one, is served all the same: the operator chose it
// (a root of /dev/shm/frames, say); a root above them (a root of "/") is not enough.
func denied(real string, r *fileRoot) (string, bool) {
	for _, d := range [...]string{"/dev", "/etc", "/proc", "/run", "/sys", "/var/run"} {
		if _, in := within(d, real); in {
			if _, chosen := within(d, r.resolved); !chosen {
				return d, true
			}
		}
	}
	return "", false
}

// locate finds the root allowing a that p, as written in a URL, lies in (by its configured
// or its resolved name; the most specific root when several hold p) and p's path below it.
func (s *fileStore) locate(p string, a access) (*fileRoot, string, error) {
	var best *fileRoot
	var bestRel string
	bestLen := -1
	for _, r := range s.roots {
		if !a.allows(r) {
			continue
		}
		for _, name := range r.names {
			if rel, ok := within(name, p); ok && len(name) > bestLen {
				best, bestRel, bestLen = r, rel, len(name)
			}
		}
	}
	if best == nil {
		return nil, "", fmt.Errorf("%w: %s is outside the file roots (%s)", ErrNotAllowed, p, a.variable)
	}
	return best, bestRel, nil
}

// serving finds the root allowing a that holds the resolved path real (the most specific
// one) and real's path below it. ok is false when there is none; denied is the denied
// folder real lies in, if that root may not serve it.
func (s *fileStore) serving(real string, a access) (r *fileRoot, rel string, ok bool, deniedDir string) {
	for _, c := range s.roots {
		if !a.allows(c) {
			continue
		}
		if cRel, in := within(c.resolved, real); in && (r == nil || len(c.resolved) > len(r.resolved)) {
			r, rel = c, cRel
		}
	}
	if r == nil {
		return nil, "", false, ""
	}
	d, _ := s.refused(real, r)
	return r, rel, true, d
}

// refused reports the folder that the resolved path real lies in when file:// may not
// serve it from root r: a denied folder (denied), or one of the store's hidden folders,
// which are never served whatever the roots (the worker's JetStream store).
func (s *fileStore) refused(real string, r *fileRoot) (string, bool) {
	if d, bad := denied(real, r); bad {
		return d, true
	}
	for _, h := range s.hidden {
		if _, in := within(h, real); in {
			return h, true
		}
	}
	return "", false
}

// leadsToRoot reports whether the resolved path real is a folder above some root allowing
// a: a real folder (a root's resolved path has no links), so a path may pass through it on
// its way into that root without it being served itself.
func (s *fileStore) leadsToRoot(real string, a access) bool {
	for _, r := range s.roots {
		if rel, ok := within(real, r.resolved); ok && rel != "." && a.allows(r) {
			return true
		}
	}
	return false
}

// resolve follows p (an absolute, clean path from a URL) one component at a time, as the
// kernel would, but with every lookup done by Lstat through the os.Root of the root that
// holds the component, and every symbolic link's target, relative or absolute, read and
// walked in its place. It fails with ErrNotAllowed as soon as the walk steps outside every
// root allowing a or into a denied folder, or after maxLinks links. A path whose tail does
// not exist resolves to where that tail would be created (info nil).
func (s *fileStore) resolve(p string, a access) (resolved, error) {
	start, rel, err := s.locate(p, a)
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
	finalLink := false
	serve := func(real string) (*fileRoot, string, error) {
		r, rel, ok, d := s.serving(real, a)
		switch {
		case !ok && links == 0:
			return nil, "", fmt.Errorf("%w: %s is outside the file roots (%s)", ErrNotAllowed, p, a.variable)
		case !ok:
			return nil, "", fmt.Errorf("%w: %s leads outside the file roots (%s) through a symbolic link", ErrNotAllowed, p, a.variable)
		case d != "" && links == 0:
			return nil, "", fmt.Errorf("%w: %s is in %s, which file:// never serves", ErrNotAllowed, p, d)
		case d != "":
			return nil, "", fmt.Errorf("%w: %s leads into %s, which file:// never serves, through a symbolic link", ErrNotAllowed, p, d)
		}
		return r, rel, nil
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
		if todo != "" && s.leadsToRoot(next, a) {
			cur, curInfo = next, nil
			continue
		}
		r, nextRel, err := serve(next)
		if err != nil {
			return resolved{}, err
		}
		info, err := r.root.Lstat(nextRel)
		if errors.Is(err, fs.ErrNotExist) {
			t, err := s.missing(p, next, todo, serve)
			t.link = finalLink // a dangling link
			return t, err
		}
		if err != nil {
			return resolved{}, fileFailure(p, fmt.Errorf("resolve: %w", err), a.write)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			// With nothing left after it, this is the path's last name, or the last name of
			// the link it was, and so on: the path names a link.
			finalLink = finalLink || todo == ""
			if links++; links > maxLinks {
				return resolved{}, fmt.Errorf("%w: %s: more than %d symbolic links (a loop?)", ErrNotAllowed, p, maxLinks)
			}
			target, err := r.root.Readlink(nextRel)
			if err != nil {
				return resolved{}, fileFailure(p, fmt.Errorf("resolve: %w", err), a.write)
			}
			if filepath.IsAbs(target) {
				cur, curInfo = "/", nil
			}
			todo = strings.TrimSuffix(filepath.ToSlash(target)+"/"+todo, "/")
			continue
		}
		if todo != "" && !info.IsDir() {
			return resolved{}, fileFailure(p, fmt.Errorf("resolve: %s: %w", next, syscall.ENOTDIR), a.write)
		}
		cur, curInfo = next, info
	}
	r, curRel, err := serve(cur)
	if err != nil {
		return resolved{}, err
	}
	if curInfo == nil { // the root itself, or a folder reached by ".." or on the way in
		if curInfo, err = r.root.Lstat(curRel); err != nil {
			return resolved{}, fileFailure(p, fmt.Errorf("resolve: %w", err), a.write)
		}
	}
	return resolved{root: r, rel: curRel, info: curInfo, link: finalLink}, nil
}

// missing resolves a path whose component next does not exist: next and the rest of the
// path (todo) are where a Put would create them. A ".." in what is left (from a link's
// target) would climb out of a folder that is not there: not found.
func (s *fileStore) missing(p, next, todo string, serve func(string) (*fileRoot, string, error)) (resolved, error) {
	for _, c := range strings.Split(todo, "/") {
		if c == ".." {
			return resolved{}, fmt.Errorf("%w: %s: a symbolic link leads through %s, which does not exist", ErrNotFound, p, next)
		}
	}
	r, rel, err := serve(filepath.Join(next, todo))
	if err != nil {
		return resolved{}, err
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
