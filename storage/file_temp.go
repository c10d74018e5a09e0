package storage

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Orphan temporary files: a Put killed between creating its .la-tmp-* file and renaming it
// (kill -9, a crash, power loss) leaves the file behind. Before writing into a folder, a
// Put removes the temporary files there older than tempMaxAge. A Put takes well under a
// second, so an hour never touches the file of a writer still at work, in this worker or
// another; the same folder is looked at again by one Store at most every sweepEvery.
const (
	tempMaxAge    = time.Hour
	sweepEvery    = 10 * time.Minute
	maxSweptDirs  = 4096 // folders remembered; beyond that the memory starts over
	sweepReadSize = 256  // directory entries read at a time
)

// sweeper remembers when a Store last swept each folder.
type sweeper struct {
	mu   sync.Mutex
	last map[string]time.Time // resolved folder path -> last sweep
}

// due reports whether the folder at dir is to be swept now, and if so records that it is.
func (w *sweeper) due(dir string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.last[dir]; ok && now.Sub(t) < sweepEvery {
		return false
	}
	if w.last == nil || len(w.last) >= maxSweptDirs {
		w.last = make(map[string]time.Time)
	}
	w.last[dir] = now
	return true
}

// sweepTemps removes from the folder dir the regular files named .la-tmp-* last modified
// before now-tempMaxAge. It is best effort: an entry that cannot be read or removed is
// left for a later sweep, and the Put that follows reports any real trouble with the
// folder.
func sweepTemps(dir *os.Root, now time.Time) error {
	f, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	var errs []error
	for {
		entries, err := f.ReadDir(sweepReadSize)
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), tempPrefix) || !e.Type().IsRegular() {
				continue
			}
			info, err := e.Info()
			if err != nil || now.Sub(info.ModTime()) < tempMaxAge {
				continue // gone already, or young enough to be a writer at work
			}
			if err := dir.Remove(e.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if errors.Is(err, io.EOF) {
			return errors.Join(errs...)
		}
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
}
