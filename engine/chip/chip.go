// Package chip gives one device one owner. Every call into the engine's device side runs on
// a single goroutine locked to one OS thread (native backends require it); synchronous
// requests go ahead of queued jobs that have not started, and a request whose caller has
// gone away is dropped before it reaches the device.
//
// When the engine is an engine.Batcher with more than one slot, the owner batches
// continuously: between two decode steps it admits waiting requests into free slots
// (interactive ones first; each runs its vision and prefill there), then advances every
// running sequence by one token in one step. A sequence that finishes, or whose caller has
// gone, leaves at the next step boundary and frees its slot; the others go on undisturbed.
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
	seq  *engine.Sequence // while running in a batch
	// started is when the owner took the work up (its wait for the chip ended there);
	// only the owner writes it, before it answers on done.
	started time.Time
}

type result struct {
	pred    *engine.Prediction
	started time.Time // zero when the work never reached the device
	err     error
}

// Chip owns one engine.
type Chip struct {
	eng engine.Engine

	mu      sync.Mutex
	queues  [2][]*work
	wake    chan struct{} // capacity 1: "the queues changed"
	closing bool

	busy    *busyMeter // device time: Generate, or Start and Step of a batch
	tokens  uint64     // tokens generated, as they are generated
	running int        // sequences in the batch now

	stopped  chan struct{}
	closeErr error // the engine's Close, set before stopped closes
}

// Open starts the owner goroutine, which locks itself to an OS thread and calls open there;
// every later device call and the engine's Close run on that same thread.
func Open(open func() (engine.Engine, error)) (*Chip, error) {
	c := &Chip{wake: make(chan struct{}, 1), stopped: make(chan struct{}),
		busy: newBusyMeter(time.Now(), BusyWindow, busyBuckets)}
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
	pred, _, err := c.GenerateTimed(ctx, prio, p)
	return pred, err
}

// GenerateTimed is Generate that also says when the device took the work up: the wait for
// the chip ends there and the device time begins (a trace shows the two apart). started is
// zero when the work never reached the device.
func (c *Chip) GenerateTimed(ctx context.Context, prio Priority, p *engine.Prepared) (pred *engine.Prediction, started time.Time, err error) {
	if prio != Interactive {
		prio = Batch
	}
	w := &work{ctx: ctx, prep: p, done: make(chan result, 1)}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, time.Time{}, ErrClosed
	}
	c.queues[prio] = append(c.queues[prio], w)
	c.mu.Unlock()
	c.signal()
	select {
	case r := <-w.done:
		return r.pred, r.started, r.err
	case <-ctx.Done():
		// Give up the place now, so a dead request neither counts as waiting nor holds its
		// Prepared in memory; if the owner has already taken it, it finishes unread.
		c.withdraw(prio, w)
		return nil, time.Time{}, fmt.Errorf("waiting for the chip: %w", ctx.Err())
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

// BusyRatio is the fraction of the last BusyWindow the chip spent in device calls (less
// than the window while the chip is younger than it); a call in flight counts up to now.
func (c *Chip) BusyRatio() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.busy.ratio(time.Now())
}

// BusySeconds is the chip's device time since it opened, in seconds, the call in flight
// included: it only grows, so its rate over any range is the busy ratio of that range.
func (c *Chip) BusySeconds() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.busy.seconds(time.Now()).Seconds()
}

// GeneratedTokens is the number of tokens the chip has generated since it opened, counted
// as each step produces them (a batched AR step of n sequences adds n; a hybrid step adds
// what each sequence committed), and the tokens of a sequence whose caller went away count
// too.
func (c *Chip) GeneratedTokens() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens
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

// Running is the number of sequences being decoded now (0 or 1 without batching).
func (c *Chip) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// device times one device call on the busy meter.
func (c *Chip) device(call func()) {
	c.mu.Lock()
	c.busy.begin(time.Now())
	c.mu.Unlock()
	call()
	c.mu.Lock()
	c.busy.end(time.Now())
	c.mu.Unlock()
}

// generated counts n tokens.
func (c *Chip) generated(n int) {
	c.mu.Lock()
	c.tokens += uint64(n)
	c.mu.Unlock()
}

func (c *Chip) setRunning(n int) {
	c.mu.Lock()
	c.running = n
	c.mu.Unlock()
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

	if b, ok := eng.(engine.Batcher); ok && b.MaxBatch() > 1 {
		c.batchLoop(b)
	} else {
		c.serialLoop()
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

// serialLoop runs one request at a time until Close.
func (c *Chip) serialLoop() {
	for {
		w, closing := c.next()
		if closing {
			return
		}
		if w == nil {
			<-c.wake
			continue
		}
		if err := w.ctx.Err(); err != nil {
			w.done <- result{err: fmt.Errorf("dropped before the chip: %w", err)}
			continue
		}
		c.setRunning(1)
		w.started = time.Now()
		var pred *engine.Prediction
		var err error
		c.device(func() { pred, err = c.eng.Generate(w.ctx, w.prep) })
		c.setRunning(0)
		if pred != nil {
			c.generated(pred.NumGeneratedTokens)
		}
		w.done <- result{pred: pred, started: w.started, err: err}
	}
}

// batchLoop batches continuously until Close, then finishes the sequences in flight.
func (c *Chip) batchLoop(b engine.Batcher) {
	var running []*work
	for {
		running = c.admit(b, running)
		c.setRunning(len(running))
		if len(running) == 0 {
			if c.isClosing() {
				return
			}
			<-c.wake
			continue
		}
		running = c.step(b, running)
	}
}

func (c *Chip) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// admit starts waiting requests in the free slots, interactive first, and returns the
// running set. Nothing new is admitted once Close has begun.
func (c *Chip) admit(b engine.Batcher, running []*work) []*work {
	for len(running) < b.MaxBatch() {
		w, closing := c.next()
		if closing || w == nil {
			break
		}
		if err := w.ctx.Err(); err != nil {
			w.done <- result{err: fmt.Errorf("dropped before the chip: %w", err)}
			continue
		}
		w.started = time.Now()
		var err error
		c.device(func() { w.seq, err = b.Start(w.prep) })
		if err != nil {
			w.done <- result{started: w.started, err: err}
			continue
		}
		c.generated(len(w.seq.Tokens)) // the first token
		// EOS first, or a budget of one token
		if w.seq.Done {
			c.finish(b, w)
			continue
		}
		running = append(running, w)
	}
	return running
}

// step drops the sequences whose callers have gone, advances the rest by one token and
// finishes those that are done; it returns the sequences still running.
func (c *Chip) step(b engine.Batcher, running []*work) []*work {
	live := running[:0]
	for _, w := range running {
		if err := w.ctx.Err(); err != nil {
			err = fmt.Errorf("after %d generated tokens: %w", len(w.seq.Tokens), err)
			if aerr := b.Abandon(w.seq); aerr != nil {
				err = errors.Join(err, aerr)
			}
			w.done <- result{started: w.started, err: err}
			continue
		}
		live = append(live, w)
	}
	clear(running[len(live):])
	if len(live) == 0 {
		return live
	}
	seqs := make([]*engine.Sequence, len(live))
	for i, w := range live {
		seqs[i] = w.seq
	}
	before := 0 // a hybrid step writes up to six tokens of a sequence, an AR step one
	for _, s := range seqs {
		before += len(s.Tokens)
	}
	var err error
	c.device(func() { err = b.Step(seqs) })
	if err != nil { // the step failed for all of them
		for _, w := range live {
			werr := err
			if aerr := b.Abandon(w.seq); aerr != nil {
				werr = errors.Join(err, aerr)
			}
			w.done <- result{started: w.started, err: werr}
		}
		clear(live)
		return live[:0]
	}
	after := 0
	for _, s := range seqs {
		after += len(s.Tokens)
	}
	c.generated(after - before)
	var done []*work
	next := live[:0]
	for _, w := range live {
		if w.seq.Done {
			done = append(done, w)
			continue
		}
		next = append(next, w)
	}
	clear(live[len(next):])
	c.setRunning(len(next)) // before the answers go out: a caller may read Running next
	for _, w := range done {
		c.finish(b, w)
	}
	return next
}

// finish answers a done sequence's caller.
func (c *Chip) finish(b engine.Batcher, w *work) {
	pred, err := b.Finish(w.seq)
	w.done <- result{pred: pred, started: w.started, err: err}
}
