// Package flock takes exclusive advisory file locks between processes (flock(2)), the
// kind huggingface_hub's filelock also takes, so Go and Python writers of one cache agree.
package flock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
