package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/imagemem"
)

// imageHold is an image's reservation in the decoded-bytes budget. release is safe to call
// more than once and on a nil hold.
type imageHold struct {
	budget *imagemem.Budget
	n      int64
	once   sync.Once
}

func (h *imageHold) release() {
	if h != nil {
		h.once.Do(func() { h.budget.Release(h.n) })
	}
}

// reserveImage takes from the budget shared by every Runner of the process
// (RunnerConfig.ImageMemory, LA_MAX_DECODED_BYTES) what img will hold once decoded and
// prepared (with the overlay when the job asks for one), as read from its header. It
// waits while others hold the budget, until the job is cancelled, the worker's grace runs
// out or the job's deadline passes (errExpired). An image that alone needs more than the
// whole budget fails at once with image_too_large.
func (r *Runner) reserveImage(ctx context.Context, job *Job, img []byte) (*imageHold, error) {
	budget := r.cfg.ImageMemory
	cost, w, h := imagemem.Cost(img, job.Overlay)
	if cost > budget.Size() {
		what := fmt.Sprintf("the %dx%d image", w, h)
		if w == 0 {
			what = fmt.Sprintf("the %d-byte image", len(img))
		}
		return nil, &jobError{code: engine.CodeImageTooLarge, err: fmt.Errorf(
			"%s needs about %d bytes of memory to decode and prepare, more than the %d bytes all jobs of a worker share (LA_MAX_DECODED_BYTES)",
			what, cost, budget.Size())}
	}
	wctx := ctx
	if job.Deadline != nil {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, *job.Deadline)
		defer cancel()
	}
	if err := budget.Acquire(wctx, cost); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, errExpired // waited for memory past the job's deadline
		}
		return nil, fmt.Errorf("wait for %d bytes of image memory: %w", cost, err)
	}
	return &imageHold{budget: budget, n: cost}, nil
}

// ImageMemoryCollectors export a decoded-bytes budget: its size, what is reserved, the
// most ever reserved at once, the reservations waiting and how many had to wait.
func ImageMemoryCollectors(b *imagemem.Budget) []prometheus.Collector {
	gauge := func(name, help string, f func(imagemem.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(b.Stats()) })
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "la_image_memory_budget_bytes", Help: "Decoded-image bytes all jobs of this worker share (LA_MAX_DECODED_BYTES).",
		}, func() float64 { return float64(b.Size()) }),
		gauge("la_image_memory_reserved_bytes", "Decoded-image bytes reserved by jobs being prepared or holding their image.",
			func(s imagemem.Stats) float64 { return float64(s.Used) }),
		gauge("la_image_memory_reserved_peak_bytes", "The most decoded-image bytes reserved at once since the worker started.",
			func(s imagemem.Stats) float64 { return float64(s.Peak) }),
		gauge("la_image_memory_waiting", "Jobs waiting for decoded-image memory.",
			func(s imagemem.Stats) float64 { return float64(s.Waiting) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "la_image_memory_waits_total", Help: "Jobs that had to wait for decoded-image memory.",
		}, func() float64 { return float64(b.Stats().Waits) }),
	}
}
