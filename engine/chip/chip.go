// Package chip gives one device one owner. Every call into the engine's device side runs on
// a single goroutine locked to one OS thread (native backends require it); synchronous
// requests go ahead of queued jobs that have not started, and a request whose caller has
// gone away is dropped before it reaches the device.
package chip

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/locateanything/detect/engine"
)

// Priority orders waiting work: Interactive (a /predict client) before Batch (a queued job).
type Priority int

const (
	Interactive Priority = iota
	Batch
)

// ErrClosed is returned for work submitted to, or still waiting in, a closed Chip.
var ErrClosed = errors.New("chip is closed")

type work struct {
	ctx  context.Context
	prep *engine.Prepared
	done chan result
}

type result struct {
	pred *engine.Prediction
	err  error
}

// Chip owns one engine.
type Chip struct {
	eng engine.Engine

	mu      sync.Mutex
	queues  [2][]*work
	wake    chan struct{} // capacity 1: "the queues changed"
	closing bool

	busy    time.Duration // device time spent in Generate
	started time.Time

	stopped  chan struct{}
	closeErr error // the engine's Close, set before stopped closes
}

// Open starts the owner goroutine, which locks itself to an OS thread and calls open there;
// every later device call and the engine's Close run on that same thread.
func Open(open func() (engine.Engine, error)) (*Chip, error) {
	c := &Chip{wake: make(chan struct{}, 1), stopped: make(chan struct{}), started: time.Now()}
	opened := make(chan error, 1)
	go c.loop(open, opened)
	if err := <-opened; err != nil {
		<-c.stopped
		return nil, err
	}
	return c, nil
}

// Engine returns the engine, for its host-side methods (Prepare, Overlay, Info), which
// may be called from any goroutine.
func (c *Chip) Engine() engine.Engine { return c.eng }

// Generate queues p at the given priority and waits for the device to run it. If ctx ends
// before the work starts, the work is dropped and ctx's error returned; once started it runs
// to completion or until Generate sees ctx cancelled between decode steps.
func (c *Chip) Generate(ctx context.Context, prio Priority, p *engine.Prepared) (*engine.Prediction, error) {
	if prio != Interactive {
		prio = Batch
	}
	w := &work{ctx: ctx, prep: p, done: make(chan result, 1)}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.queues[prio] = append(c.queues[prio], w)
	c.mu.Unlock()
	c.signal()
	select {
	case r := <-w.done:
		return r.pred, r.err
	case <-ctx.Done():
		// Give up the place now, so a dead request neither counts as waiting nor holds its
		// Prepared in memory; if the owner has already taken it, it finishes unread.
		c.withdraw(prio, w)
		return nil, fmt.Errorf("waiting for the chip: %w", ctx.Err())
	}
}

// withdraw takes w out of its queue if the owner has not taken it yet.
func (c *Chip) withdraw(prio Priority, w *work) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.queues[prio], w); i >= 0 {
		c.queues[prio] = slices.Delete(c.queues[prio], i, i+1)
	}
}

// Waiting is the number of requests queued and not yet started.
func (c *Chip) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queues[0]) + len(c.queues[1])
}

// BusyRatio is the fraction of the chip's lifetime spent generating.
func (c *Chip) BusyRatio() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	life := time.Since(c.started)
	if life <= 0 {
		return 0
	}
	return float64(c.busy) / float64(life)
}

// Close finishes the work in flight, fails everything still waiting with ErrClosed, closes
// the engine on its own thread and returns its error.
func (c *Chip) Close() error {
	c.mu.Lock()
	already := c.closing
	c.closing = true
	c.mu.Unlock()
	if !already {
		c.signal()
	}
	<-c.stopped
	return c.closeErr
}

func (c *Chip) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// next pops the first waiting work, interactive first. ok is false when closing.
func (c *Chip) next() (w *work, closing bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, true
	}
	for p := range c.queues {
		if len(c.queues[p]) > 0 {
			w = c.queues[p][0]
			c.queues[p][0] = nil
			c.queues[p] = c.queues[p][1:]
			return w, false
		}
	}
	return nil, false
}

func (c *Chip) loop(open func() (engine.Engine, error), opened chan<- error) {
	defer close(c.stopped)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	eng, err := open()
	if err != nil {
		opened <- err
		return
	}
	c.eng = eng
	opened <- nil

	for {
		w, closing := c.next()
		if closing {
			break
		}
		if w == nil {
			<-c.wake
			continue
		}
		if err := w.ctx.Err(); err != nil {
			w.done <- result{err: fmt.Errorf("dropped before the chip: %w", err)}
			continue
		}
		start := time.Now()
		pred, err := c.eng.Generate(w.ctx, w.prep)
		c.mu.Lock()
		c.busy += time.Since(start)
		c.mu.Unlock()
		w.done <- result{pred: pred, err: err}
	}

	c.mu.Lock()
	waiting := append(c.queues[0], c.queues[1]...)
	c.queues = [2][]*work{}
	c.mu.Unlock()
	for _, w := range waiting {
		w.done <- result{err: ErrClosed}
	}
	c.closeErr = c.eng.Close()
}
