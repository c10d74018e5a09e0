// Package testwait is the one polling helper of the repository's tests: a test that waits
// for something another goroutine, process or server makes happen polls for it with Until
// instead of sleeping for a guessed time.
package testwait

import (
	"testing"
	"time"
)

// MaxInterval is the longest pause between two checks of a condition. Until checks again
// after 1 ms, then doubles the pause up to MaxInterval: an in-process condition is seen at
// once, and one that asks a server (NATS, S3) does not flood it.
const MaxInterval = 10 * time.Millisecond

// Until checks cond until it returns true, and fails the test with what (Fatalf: call it
// from the test's own goroutine) when within passes first. within is a generous bound
// against a hang, not a timing assertion. cond runs on the caller's goroutine, so it may
// itself fail the test.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", within, what)
			return // a testing.TB whose Fatalf returns (a test of this package's callers)
		}
		time.Sleep(pause)
		pause = min(2*pause, MaxInterval)
	}
}
