package console

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// thumbRequest is one picture to make a thumbnail of, and where the answer goes.
type thumbRequest struct {
	src []byte
	out chan<- thumbResult
}

type thumbResult struct {
	data []byte
	err  error
}

// thumbMaker makes thumbnails on one goroutine locked to its own OS thread, which runs at
// the lowest scheduling priority (lowerThreadPriority): when the CPUs are busy with the
// chips' host work, decoding and scaling pictures for the console waits, not the jobs.
// The OS priority does not reach Go code holding a scheduler processor, so the goroutine
// also paces itself while the worker is busy (thumbPacer). It ends with ctx; the thread
// ends with it.
func thumbMaker(ctx context.Context, requests <-chan thumbRequest, pace *thumbPacer, lowered func(error)) {
	runtime.LockOSThread() // never unlocked: the lowered thread goes when the goroutine does
	lowered(lowerThreadPriority())
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-requests:
			start := threadCPUTime() // this goroutine's own: it has the thread to itself
			data, err := makeThumb(r.src)
			r.out <- thumbResult{data: data, err: err}
			if wait := pace.spent(threadCPUTime() - start); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
	}
}

// thumbTurnWait is how long a thumbnail request waits for its turn before it is answered
// 503 (errThumbNotReady).
const thumbTurnWait = 2 * time.Second

// makeThumbLow hands src to the thumbnail goroutine, waiting for it (it may be pacing
// itself) as long as turn allows, and then waits for its answer as long as ctx allows.
func (c *Console) makeThumbLow(ctx, turn context.Context, src []byte) ([]byte, error) {
	out := make(chan thumbResult, 1)
	req := thumbRequest{src: src, out: out}
	select {
	case c.thumbReqs <- req: // the goroutine is free: whatever time the turn has left
	default:
		select {
		case c.thumbReqs <- req:
		case <-turn.Done():
			return nil, fmt.Errorf("waiting to make a thumbnail: %w: %w", errThumbNotReady, turn.Err())
		}
	}
	select {
	case r := <-out:
		return r.data, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("making a thumbnail: %w: %w", errThumbNotReady, ctx.Err())
	}
}
