// Package flock takes exclusive advisory file locks between processes (flock(2)), the
// kind huggingface_hub's filelock also takes, so Go and Python writers of one cache agree.
package flock

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Lock takes an exclusive lock on path (created with its directory when missing), trying
// again every poll while another process holds it, until ctx ends. The lock is released
// when unlock runs or the process dies, so a crashed holder never blocks the next one.
func Lock(ctx context.Context, path string, poll time.Duration) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the holder of %s: %w", path, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// HeldError is TryLock's answer when another process holds the lock: Note is what the
// holder wrote into the lock file (empty if it has not yet).
type HeldError struct {
	Path string
	Note string
}

func (e *HeldError) Error() string {
	if e.Note == "" {
		return fmt.Sprintf("%s is locked by another process", e.Path)
	}
	return fmt.Sprintf("%s is locked by another process (%s)", e.Path, e.Note)
}

// TryLock takes an exclusive lock on path (created when missing) without waiting, and
// replaces the file's contents with note, so that the next process to try can say who
// holds it. When another process holds the lock it returns a *HeldError carrying that
// holder's note. Like Lock's, the lock ends with unlock or with the process.
func TryLock(path string, note string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if err != syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, _ := io.ReadAll(io.LimitReader(f, 256))
		return nil, &HeldError{Path: path, Note: strings.TrimSpace(string(held))}
	}
	unlock = func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
	// The note is written only under the lock, so a reader sees one holder's note: the
	// current one's, or none while it is being written.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(note+"\n"), 0)
	}
	if err != nil {
		unlock()
		return nil, fmt.Errorf("lock %s: writing its note: %w", path, err)
	}
	return unlock, nil
}
