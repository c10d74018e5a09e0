//go:build unix

package sim

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleepFor blocks the calling thread in nanosleep(2) for d. The kernel's high-resolution
// timer wakes it about a tenth of a millisecond late on an idle machine, where the Go
// runtime's timers (time.Sleep) wake up to a millisecond late, rounding up to whole
// milliseconds: over a 24 ms decode step that would be 2 to 4 % of device time lost to the
// simulation itself. The runtime hands the thread's processor to other goroutines while
// it sleeps, as for any blocking system call.
func sleepFor(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR { // a signal: sleep what is left
	}
}
