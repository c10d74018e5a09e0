package worker

import (
	"errors"
	"time"

	"github.com/locateanything/detect/jobs"
)

// topologyCheckInterval is how often the healer looks for vanished streams, consumers and
// the state bucket when nothing failed; a failed pull or publish makes it look within a
// second.
const topologyCheckInterval = 10 * time.Second

// startHealer starts the topology's healer on the worker's lifetime.
func (s *service) startHealer() error {
	h, err := jobs.NewHealer(s.topo, jobs.HealerConfig{
		Interval: topologyCheckInterval, OpTimeout: min(s.cfg.Runner.OpTimeout, 5*time.Second),
		Logger: s.log, Metrics: s.metrics,
	})
	if err != nil {
		return err
	}
	s.healer = h
	done := h.Start(s.runCtx)
	s.wg.Go(func() { <-done })
	return nil
}

// queueReadiness is nil while every Runner can pull jobs and the topology is whole, else
// why not (a vanished consumer until the healer has recreated it, say).
func (s *service) queueReadiness() error {
	errs := []error{s.healer.Err()}
	for _, r := range s.runners {
		errs = append(errs, r.Ready())
	}
	return errors.Join(errs...)
}
