package chip

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
)

// held is the engine double with every Generate held at its gate until free is called, so
// a test can line work up behind the call on the device; started receives each query as
// Generate begins.
type held struct {
	*enginetest.Engine
	started <-chan string
	free    func() // lets every held call finish; safe to call more than once
}

func newHeld() *held {
	started := make(chan string, 64)
	release := make(chan struct{})
	eng := enginetest.New()
	eng.Started, eng.Release = started, release
	var once sync.Once
	return &held{Engine: eng, started: started, free: func() { once.Do(func() { close(release) }) }}
}

func openChip(t *testing.T, h *held) *Chip {
	t.Helper()
	c, err := Open(func() (engine.Engine, error) { return h.Engine, nil })
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		h.free() // a test that failed while holding the chip must not hang Close
		_ = c.Close()
	})
	return c
}

func prepared(query string) *engine.Prepared {
	return &engine.Prepared{Request: engine.Request{Query: query}}
}

// submit runs Generate on its own goroutine and returns where its outcome arrives.
func submit(ctx context.Context, c *Chip, prio Priority, query string) <-chan error {
	out := make(chan error, 1)
	go func() {
		pred, err := c.Generate(ctx, prio, prepared(query))
		if err == nil && pred.Query != query {
			err = fmt.Errorf("got the prediction for %q, want %q", pred.Query, query)
		}
		out <- err
	}()
	return out
}

// waitQueued waits until n requests wait for the chip: a synchronisation point, not a timer.
func waitQueued(t *testing.T, c *Chip, n int) {
	t.Helper()
	testwait.Until(t, time.Minute, fmt.Sprintf("%d requests to wait for the chip", n), func() bool { return c.Waiting() >= n })
}

func TestInteractiveGoesBeforeBatch(t *testing.T) {
	rec := newHeld()
	c := openChip(t, rec)
	ctx := context.Background()

	outs := []<-chan error{submit(ctx, c, Batch, "blocker")}
	if q := <-rec.started; q != "blocker" {
		t.Fatalf("first on the chip: %q", q)
	}
	// Queue in an order that interleaves the two priorities.
	for i, w := range []struct {
		prio  Priority
		query string
	}{{Batch, "batch-1"}, {Interactive, "sync-1"}, {Batch, "batch-2"}, {Interactive, "sync-2"}} {
		outs = append(outs, submit(ctx, c, w.prio, w.query))
		waitQueued(t, c, i+1)
	}
	rec.free()
	for _, out := range outs {
		if err := <-out; err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"blocker", "sync-1", "sync-2", "batch-1", "batch-2"}
	if got := rec.Seen(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("device order %v, want %v", got, want)
	}
}

func TestUnknownPriorityCountsAsBatch(t *testing.T) {
	rec := newHeld()
	c := openChip(t, rec)
	ctx := context.Background()
	outs := []<-chan error{submit(ctx, c, Batch, "blocker")}
	<-rec.started
	outs = append(outs, submit(ctx, c, Priority(7), "odd"))
	waitQueued(t, c, 1)
	outs = append(outs, submit(ctx, c, Interactive, "sync"))
	waitQueued(t, c, 2)
	rec.free()
	for _, out := range outs {
		if err := <-out; err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmt.Sprint(rec.Seen()), fmt.Sprint([]string{"blocker", "sync", "odd"}); got != want {
		t.Fatalf("device order %v, want %v", got, want)
	}
}

func TestCancelledBeforeStartNeverReachesEngine(t *testing.T) {
	rec := newHeld()
	c := openChip(t, rec)
	bg := context.Background()

	blocker := submit(bg, c, Batch, "blocker")
	<-rec.started

	ctx, cancel := context.WithCancel(bg)
	gone := submit(ctx, c, Interactive, "gone")
	waitQueued(t, c, 1)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: err %v, want context.Canceled", err)
	}
	// It gives up its place at once: it no longer counts as waiting, nor holds its
	// Prepared (image, patches) until the owner gets round to it.
	if n := c.Waiting(); n != 0 {
		t.Fatalf("Waiting after the only waiter gave up: %d, want 0", n)
	}

	// A context that ended before Generate was even called.
	dead, kill := context.WithCancel(bg)
	kill()
	if _, err := c.Generate(dead, Interactive, prepared("dead")); !errors.Is(err, context.Canceled) {
		t.Fatalf("dead context: err %v, want context.Canceled", err)
	}

	rec.free()
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	// The owner passes both dropped requests before it reaches this one.
	if err := <-submit(bg, c, Batch, "after"); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(rec.Seen()), fmt.Sprint([]string{"blocker", "after"}); got != want {
		t.Fatalf("engine saw %v, want %v", got, want)
	}
	if n := c.Waiting(); n != 0 {
		t.Fatalf("Waiting after the queue drained: %d", n)
	}
}

func TestCancelWhileRunningReachesEngine(t *testing.T) {
	rec := newHeld()
	c := openChip(t, rec)
	ctx, cancel := context.WithCancel(context.Background())
	out := submit(ctx, c, Interactive, "long")
	<-rec.started
	cancel()
	if err := <-out; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	// The caller may return before the engine does; the engine must see the cancellation.
	testwait.Until(t, time.Minute, "the engine to end the canceled call", func() bool { return rec.Canceled() == 1 })
}

func TestCloseFailsWaitersWithErrClosed(t *testing.T) {
	rec := newHeld()
	c, err := Open(func() (engine.Engine, error) { return rec.Engine, nil })
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	blocker := submit(bg, c, Batch, "blocker")
	<-rec.started
	var waiters []<-chan error
	for i, prio := range []Priority{Interactive, Batch, Batch} {
		waiters = append(waiters, submit(bg, c, prio, fmt.Sprintf("waiter-%d", i)))
		waitQueued(t, c, i+1)
	}

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// Close marks the chip closing before it waits for the owner; a new request sees it at once.
	probe, stop := context.WithCancel(bg)
	stop()
	testwait.Until(t, time.Minute, "Close to refuse new work", func() bool {
		_, err := c.Generate(probe, Batch, prepared("probe"))
		return errors.Is(err, ErrClosed)
	})

	rec.free() // the work in flight finishes...
	if err := <-blocker; err != nil {
		t.Fatalf("work in flight during Close: %v", err)
	}
	for i, w := range waiters { // ...everything still waiting fails
		if err := <-w; !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter %d: err %v, want ErrClosed", i, err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := rec.Seen(); len(got) != 1 {
		t.Fatalf("engine saw %v, want only the blocker", got)
	}
	if _, err := c.Generate(bg, Interactive, prepared("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Generate after Close: err %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n := rec.Closed(); n != 1 {
		t.Fatalf("engine closed %d times, want 1", n)
	}
}

func TestEveryDeviceCallRunsOnOneThread(t *testing.T) {
	var mu sync.Mutex
	var tids []int // thread of open, every Generate, and Close
	noteThread := func() {
		mu.Lock()
		tids = append(tids, syscall.Gettid())
		mu.Unlock()
	}
	eng := enginetest.New()
	eng.OnCall = func(method, _ string) {
		if method == "Generate" || method == "Close" {
			noteThread()
		}
	}
	c, err := Open(func() (engine.Engine, error) {
		noteThread()
		return eng, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			prio := Priority(i % 2)
			if _, err := c.Generate(context.Background(), prio, prepared(fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
			runtime.Gosched()
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(tids) != 32+2 {
		t.Fatalf("%d device calls recorded, want 34 (open, 32 Generate, Close)", len(tids))
	}
	for i, tid := range tids {
		if tid != tids[0] {
			t.Fatalf("call %d ran on thread %d, open ran on %d", i, tid, tids[0])
		}
	}
}

func TestOpenErrorIsReturned(t *testing.T) {
	boom := errors.New("no device")
	c, err := Open(func() (engine.Engine, error) { return nil, boom })
	if !errors.Is(err, boom) || c != nil {
		t.Fatalf("Open = %v, %v; want nil, %v", c, err, boom)
	}
}

// TestCloseUnderLoad checks that no caller hangs or loses its answer when Close races with
// a stream of requests: each gets its prediction or ErrClosed.
func TestCloseUnderLoad(t *testing.T) {
	eng := enginetest.New()
	c, err := Open(func() (engine.Engine, error) { return eng, nil })
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered, refused := 0, 0
	for i := range 64 {
		wg.Go(func() {
			pred, err := c.Generate(context.Background(), Priority(i%2), prepared(fmt.Sprint(i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && pred.Query == fmt.Sprint(i):
				answered++
			case errors.Is(err, ErrClosed):
				refused++
			default:
				t.Errorf("request %d: %v, %v", i, pred, err)
			}
		})
		if i == 32 {
			wg.Go(func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	if answered+refused != 64 {
		t.Fatalf("%d answered + %d refused != 64", answered, refused)
	}
	if got := len(eng.Seen()); got != answered {
		t.Fatalf("engine ran %d, callers got %d answers", got, answered)
	}
}
