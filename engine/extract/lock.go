package extract

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockPoll is how often a process waiting for another's extraction tries the lock again.
const lockPoll = 250 * time.Millisecond

// lockFile takes an exclusive flock on path, waiting while another process holds it,
// until ctx ends. The lock is released when the returned function runs or the process
// dies, so a crashed extraction never blocks the next boot.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
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
			return nil, fmt.Errorf("waiting for another extraction (lock %s): %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
