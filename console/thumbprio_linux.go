package console

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// lowerThreadPriority gives the calling OS thread the lowest priority (nice 19); on Linux
// a nice value is per thread.
func lowerThreadPriority() error {
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19); err != nil {
		return fmt.Errorf("lower the thumbnail thread's priority: %w", err)
	}
	return nil
}
