package weights

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockPoll is how often a process waiting for another's download checks the lock again.
const lockPoll = 500 * time.Millisecond

// lockFile takes an exclusive flock on p, waiting (until ctx ends) while another process
// holds it. huggingface_hub's filelock takes the same kind of lock on the same path, so a
// Python download and this one do not write the same blob at once.
func lockFile(ctx context.Context, p string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
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
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another download of the same file (lock %s): %w", p, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
