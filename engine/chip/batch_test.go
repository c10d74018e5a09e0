package chip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
)

// batcher is an engine.Batcher double for the scheduling edge cases: a request "name/N"
// generates N tokens; every Step waits for the test to let it through (step), so a test
// decides what is waiting at each step boundary. The claims about real answers live in
// batch_pipeline_test.go, on the real pipeline.
type batcher struct {
	*enginetest.Engine // Prepare, Overlay, Info, Close
	slots              int
	gate               chan struct{} // one receive per Step
	failStep           int           // Step number that fails (0 = none)

	mu        sync.Mutex
	used      []bool
	starts    []string   // names, in Start order
	steps     [][]string // names of each Step's sequences
	abandoned []string
	threads   map[int]bool // OS threads the device methods ran on
}

func newBatcher(slots int) *batcher {
	return &batcher{Engine: enginetest.New(), slots: slots, gate: make(chan struct{}),
		used: make([]bool, slots), threads: map[int]bool{}}
}

func (b *batcher) MaxBatch() int { return b.slots }

func (b *batcher) onThread() {
	b.mu.Lock()
	b.threads[syscall.Gettid()] = true
	b.mu.Unlock()
}

func nameOf(s *engine.Sequence) string {
	name, _, _ := strings.Cut(s.Prepared.Request.Query, "/")
	return name
}

func (b *batcher) Start(p *engine.Prepared) (*engine.Sequence, error) {
	b.onThread()
	b.mu.Lock()
	defer b.mu.Unlock()
	slot := slices.Index(b.used, false)
	if slot < 0 {
		return nil, errors.New("no free slot: the chip admitted more than MaxBatch")
	}
	b.used[slot] = true
	s := &engine.Sequence{Prepared: p, Slot: slot, Tokens: []int32{1}}
	s.Done = len(s.Tokens) >= p.MaxNewTokens
	b.starts = append(b.starts, nameOf(s))
	return s, nil
}

func (b *batcher) Step(seqs []*engine.Sequence) error {
	b.onThread()
	<-b.gate
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	for _, s := range seqs {
		if s.Done || !b.used[s.Slot] {
			return fmt.Errorf("stepped %s: done %v, slot %d in use %v", nameOf(s), s.Done, s.Slot, b.used[s.Slot])
		}
		names = append(names, nameOf(s))
	}
	b.steps = append(b.steps, names)
	if len(b.steps) == b.failStep {
		return errors.New("device fell over")
	}
	for _, s := range seqs {
		s.Tokens = append(s.Tokens, int32(len(s.Tokens)+1))
		s.Done = len(s.Tokens) >= s.Prepared.MaxNewTokens
	}
	return nil
}

func (b *batcher) Finish(s *engine.Sequence) (*engine.Prediction, error) {
	b.onThread()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used[s.Slot] = false
	return &engine.Prediction{Query: s.Prepared.Request.Query, Tokens: s.Tokens, NumGeneratedTokens: len(s.Tokens)}, nil
}

func (b *batcher) Abandon(s *engine.Sequence) error {
	b.onThread()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used[s.Slot] = false
	b.abandoned = append(b.abandoned, nameOf(s))
	return nil
}

// step lets one Step through.
func (b *batcher) step(t *testing.T) {
	t.Helper()
	select {
	case b.gate <- struct{}{}:
	case <-time.After(time.Minute):
		t.Fatal("no Step came to the gate")
	}
}

func (b *batcher) record() (starts []string, steps [][]string, abandoned []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.starts), slices.Clone(b.steps), slices.Clone(b.abandoned)
}

func openBatcher(t *testing.T, b *batcher) *Chip {
	t.Helper()
	c, err := Open(func() (engine.Engine, error) { return b, nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(b.gate) // every later Step passes, so Close can drain
		_ = c.Close()
	})
	return c
}

type outcome struct {
	pred *engine.Prediction
	err  error
}

// run submits "name/N" and returns where its outcome arrives.
func run(ctx context.Context, c *Chip, prio Priority, name string, tokens int) <-chan outcome {
	out := make(chan outcome, 1)
	p := &engine.Prepared{Request: engine.Request{Query: name + "/" + strconv.Itoa(tokens)}, MaxNewTokens: tokens}
	go func() {
		pred, err := c.Generate(ctx, prio, p)
		out <- outcome{pred, err}
	}()
	return out
}

func waitStarts(t *testing.T, b *batcher, n int) {
	t.Helper()
	testwait.Until(t, time.Minute, fmt.Sprintf("%d sequences to start", n), func() bool {
		starts, _, _ := b.record()
		return len(starts) >= n
	})
}

func wantTokens(t *testing.T, o outcome, name string, n int) {
	t.Helper()
	if o.err != nil {
		t.Fatalf("%s: %v", name, o.err)
	}
	if !strings.HasPrefix(o.pred.Query, name+"/") || o.pred.NumGeneratedTokens != n {
		t.Fatalf("%s: got %q with %d tokens, want %d", name, o.pred.Query, o.pred.NumGeneratedTokens, n)
	}
}

func TestBatchJoinsBetweenStepsAndLeavesWhenDone(t *testing.T) {
	b := newBatcher(4)
	c := openBatcher(t, b)
	a := run(context.Background(), c, Batch, "a", 3)
	waitStarts(t, b, 1)
	bb := run(context.Background(), c, Batch, "b", 2) // arrives while a's first step is on the device
	waitQueued(t, c, 1)
	b.step(t) // a: 2 tokens; then b joins at the boundary
	b.step(t) // a and b together: both done
	wantTokens(t, <-a, "a", 3)
	wantTokens(t, <-bb, "b", 2)
	_, steps, _ := b.record()
	if want := [][]string{{"a"}, {"a", "b"}}; !slices.EqualFunc(steps, want, slices.Equal) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if n := c.Running(); n != 0 {
		t.Fatalf("Running after both finished: %d", n)
	}
}

func TestBatchAdmitsInteractiveFirstWhenASlotFrees(t *testing.T) {
	b := newBatcher(2)
	c := openBatcher(t, b)
	j1 := run(context.Background(), c, Batch, "j1", 2)
	waitStarts(t, b, 1) // j1's first step is now on the device
	j2 := run(context.Background(), c, Batch, "j2", 5)
	waitQueued(t, c, 1)
	j3 := run(context.Background(), c, Batch, "j3", 2)
	waitQueued(t, c, 2)
	i := run(context.Background(), c, Interactive, "i", 2)
	waitQueued(t, c, 3)
	for range 5 {
		b.step(t)
	}
	wantTokens(t, <-j1, "j1", 2)
	wantTokens(t, <-i, "i", 2)
	wantTokens(t, <-j3, "j3", 2)
	wantTokens(t, <-j2, "j2", 5)
	starts, steps, _ := b.record()
	if want := []string{"j1", "i", "j2", "j3"}; !slices.Equal(starts, want) {
		t.Fatalf("start order %v, want %v: the interactive request takes the first free slot", starts, want)
	}
	if want := [][]string{{"j1"}, {"i", "j2"}, {"j2", "j3"}, {"j2"}, {"j2"}}; !slices.EqualFunc(steps, want, slices.Equal) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
}

func TestBatchCancelLeavesTheOthersAlone(t *testing.T) {
	b := newBatcher(4)
	c := openBatcher(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := run(context.Background(), c, Batch, "a", 5)
	waitStarts(t, b, 1)
	victim := run(ctx, c, Batch, "v", 5)
	waitQueued(t, c, 1)
	b.step(t) // [a]; v joins after it
	waitStarts(t, b, 2)
	cancel() // while [a v] waits for the device
	if o := <-victim; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled sequence: %v, want context.Canceled", o.err)
	}
	b.step(t) // [a v] completes; v leaves at the boundary
	testwait.Until(t, time.Minute, "the cancelled sequence to leave", func() bool {
		_, _, abandoned := b.record()
		return slices.Equal(abandoned, []string{"v"})
	})
	late := run(context.Background(), c, Batch, "late", 2) // takes a free slot
	waitQueued(t, c, 1)
	b.step(t) // [a]; late joins after it
	b.step(t) // [a late]: both done
	wantTokens(t, <-a, "a", 5)
	wantTokens(t, <-late, "late", 2)
	_, steps, _ := b.record()
	if want := [][]string{{"a"}, {"a", "v"}, {"a"}, {"a", "late"}}; !slices.EqualFunc(steps, want, slices.Equal) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
}

func TestBatchCloseFinishesRunningAndFailsWaiting(t *testing.T) {
	b := newBatcher(2)
	c, err := Open(func() (engine.Engine, error) { return b, nil })
	if err != nil {
		t.Fatal(err)
	}
	a := run(context.Background(), c, Batch, "a", 3)
	waitStarts(t, b, 1)
	x := run(context.Background(), c, Batch, "x", 3)
	y := run(context.Background(), c, Interactive, "y", 3)
	waitQueued(t, c, 2)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	testwait.Until(t, time.Minute, "Close to begin", c.isClosing)
	b.step(t)
	b.step(t)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wantTokens(t, <-a, "a", 3)
	for _, o := range []<-chan outcome{x, y} {
		if r := <-o; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("a request waiting at Close: %v, want ErrClosed", r.err)
		}
	}
	if _, err := c.Generate(context.Background(), Batch, &engine.Prepared{MaxNewTokens: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Generate after Close: %v, want ErrClosed", err)
	}
}

func TestBatchStepFailureFailsTheStepAndTheChipGoesOn(t *testing.T) {
	b := newBatcher(4)
	b.failStep = 1
	c := openBatcher(t, b)
	a := run(context.Background(), c, Batch, "a", 3)
	waitStarts(t, b, 1)
	b.step(t)
	if o := <-a; o.err == nil || !strings.Contains(o.err.Error(), "device fell over") {
		t.Fatalf("a sequence in the failed step: %v, want the device's error", o.err)
	}
	next := run(context.Background(), c, Batch, "next", 2)
	b.step(t)
	wantTokens(t, <-next, "next", 2)
	if _, _, abandoned := b.record(); !slices.Equal(abandoned, []string{"a"}) {
		t.Fatalf("abandoned %v, want [a]: a failed step frees its slots", abandoned)
	}
}

func TestBatchDeviceCallsStayOnOneThread(t *testing.T) {
	b := newBatcher(3)
	c := openBatcher(t, b)
	var outs []<-chan outcome
	for i := range 6 {
		outs = append(outs, run(context.Background(), c, Priority(i%2), fmt.Sprint("r", i), 2+i%3))
	}
	stop := pump(b)
	for _, o := range outs {
		if r := <-o; r.err != nil {
			t.Fatal(r.err)
		}
	}
	stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.threads) != 1 {
		t.Fatalf("device methods ran on %d OS threads, want 1", len(b.threads))
	}
}

// pump lets every Step through until the returned stop is called.
func pump(b *batcher) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case b.gate <- struct{}{}:
			case <-done:
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func TestBatchDeadlineStopsOneSequence(t *testing.T) {
	b := newBatcher(4)
	c := openBatcher(t, b)
	a := run(context.Background(), c, Batch, "a", 4)
	waitStarts(t, b, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	late := run(ctx, c, Interactive, "d", 4)
	waitQueued(t, c, 1)
	b.step(t) // [a]; d joins after it
	waitStarts(t, b, 2)
	<-ctx.Done()
	if o := <-late; !errors.Is(o.err, context.DeadlineExceeded) {
		t.Fatalf("sequence past its deadline: %v, want context.DeadlineExceeded", o.err)
	}
	b.step(t) // [a d]; d leaves at the boundary
	b.step(t) // [a]: done
	wantTokens(t, <-a, "a", 4)
	_, steps, abandoned := b.record()
	if want := [][]string{{"a"}, {"a", "d"}, {"a"}}; !slices.EqualFunc(steps, want, slices.Equal) || !slices.Equal(abandoned, []string{"d"}) {
		t.Fatalf("steps %v abandoned %v, want %v and [d]", steps, abandoned, want)
	}
}
