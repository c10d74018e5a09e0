// Package imagemem bounds the memory a process spends on images being decoded and
// prepared: Cost estimates from an image's header alone what decoding and preparing it
// will hold, and a Budget, a semaphore counted in bytes, lets through only what fits.
// The job runners and /predict reserve an image's cost before decoding it and release it
// once its large buffers are dropped.
package imagemem

import (
	"context"
	"slices"
	"sync"
)

// Budget is a semaphore counted in bytes: the memory pending images may hold. A
// reservation that fits in what is free goes at once, even past older ones waiting for
// more than that: an ordinary photo is not held up behind a 36-megapixel scan. Freed bytes
// go to the waiters that fit, oldest first. A large image can therefore wait while smaller
// ones keep the budget busy, up to its caller's deadline. It is safe for concurrent use.
type Budget struct {
	size int64

	mu      sync.Mutex
	used    int64
	peak    int64     // the most ever granted at once
	waits   uint64    // reservations that had to wait
	waiters []*waiter // oldest first
}

type waiter struct {
	n     int64
	ready chan struct{} // closed when the bytes are granted
}

// NewBudget returns a budget of size bytes.
func NewBudget(size int64) *Budget { return &Budget{size: size} }

// Size is the budget's size in bytes.
func (b *Budget) Size() int64 { return b.size }

// Acquire reserves n bytes, waiting until they fit or ctx ends (then it returns ctx's
// error and holds nothing). n must not exceed the budget's size: the caller refuses such
// an image instead of waiting forever.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.used+n <= b.size {
		b.take(n)
		b.mu.Unlock()
		return nil
	}
	wt := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, wt)
	b.waits++
	b.mu.Unlock()
	select {
	case <-wt.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-wt.ready: // granted as ctx ended: give it back
		b.used -= n
	default:
		b.waiters = slices.DeleteFunc(b.waiters, func(o *waiter) bool { return o == wt })
	}
	b.grant() // the next waiter may fit now
	return ctx.Err()
}

// Release returns n bytes that Acquire granted.
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.used < 0 {
		panic("imagemem: budget released more than it granted")
	}
	b.grant()
}

// take grants n bytes; b.mu is held.
func (b *Budget) take(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

// grant hands the free bytes to every waiter that fits, oldest first; b.mu is held.
func (b *Budget) grant() {
	b.waiters = slices.DeleteFunc(b.waiters, func(wt *waiter) bool {
		if b.used+wt.n > b.size {
			return false
		}
		b.take(wt.n)
		close(wt.ready)
		return true
	})
}

// Stats is a snapshot of a Budget.
type Stats struct {
	Used    int64  // bytes granted and not yet released
	Peak    int64  // the most bytes ever granted at once
	Waiting int    // reservations waiting now
	Waits   uint64 // reservations that had to wait, since the budget was made
}

// Stats reports what is held and waiting.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Used: b.used, Peak: b.peak, Waiting: len(b.waiters), Waits: b.waits}
}
