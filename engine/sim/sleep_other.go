//go:build !unix

package sim

import "time"

// sleepFor sleeps for d with the Go runtime's timer (up to a millisecond late).
func sleepFor(d time.Duration) { time.Sleep(d) }
