package console

import (
	"fmt"
	"time"

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

// processCPUTime is the user and system CPU time the whole process has used.
func processCPUTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPUTime is the CPU time the calling OS thread has used.
func threadCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
