package jobs

import (
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// pullHealth remembers whether a Runner's last pull from the shared consumer worked: a
// pull that got a job or waited out its time without one did; any other error (the
// consumer or LA_JOBS gone, NATS down) did not.
type pullHealth struct {
	mu  sync.Mutex
	err error
}

func (p *pullHealth) record(err error) {
	if errors.Is(err, nats.ErrTimeout) {
		err = nil
	}
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

// Ready is nil while the Runner can pull jobs (also before its first pull), else why not.
func (r *Runner) Ready() error {
	r.pullFailure.mu.Lock()
	defer r.pullFailure.mu.Unlock()
	if r.pullFailure.err != nil {
		return fmt.Errorf("runner %s cannot pull from %s/%s: %w", r.cfg.Worker, JobsStream, ConsumerName, r.pullFailure.err)
	}
	return nil
}
