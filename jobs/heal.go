package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// HealerConfig tunes a Healer; Interval and OpTimeout are required.
type HealerConfig struct {
	Interval  time.Duration // between two checks when nothing asks for one sooner
	OpTimeout time.Duration // limit of one look-up or creation
	Logger    *slog.Logger  // nil discards
	Metrics   *Metrics      // nil records nothing
}

// healCooldown is the shortest time between two checks: a Nudge sooner waits for it.
const healCooldown = time.Second

// Healer keeps the topology whole: it checks every Interval, and soon after a Nudge, that
// each stream, consumer and the state bucket EnsureTopology made still exists, and
// recreates what disappeared (an operator's `nats consumer rm`, a lost stream) with the
// same configuration, saying so with an error log and la_topology_recreated_total.
// Recreating is idempotent, so several workers that find the same object gone all
// recreate it safely. The Topology's handles name their objects, so every component
// holding one uses the recreated object at its next call.
//
// What a deleted stream held is gone with it: the healer restores the way jobs flow, not
// jobs, results or records that were deleted.
type Healer struct {
	topo  *Topology
	cfg   HealerConfig
	log   *slog.Logger
	nudge chan struct{} // capacity 1: a pending request for a check

	mu  sync.Mutex
	err error // of the last check
}

// NewHealer prepares a healer of topo; Start runs it.
func NewHealer(topo *Topology, cfg HealerConfig) (*Healer, error) {
	if topo == nil {
		return nil, errors.New("new healer: a topology is required")
	}
	if cfg.Interval <= 0 || cfg.OpTimeout <= 0 {
		return nil, fmt.Errorf("new healer: interval %s and op timeout %s must be positive", cfg.Interval, cfg.OpTimeout)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Metrics.recreatedSeries(topo.parts())
	return &Healer{topo: topo, cfg: cfg, log: log.With("component", "topology"), nudge: make(chan struct{}, 1)}, nil
}

// Nudge asks for a check soon (within healCooldown of the last one); a component calls it
// when a call on the topology failed in a way a missing object explains. It never blocks;
// on a nil Healer it does nothing.
func (h *Healer) Nudge() {
	if h == nil {
		return
	}
	select {
	case h.nudge <- struct{}{}:
	default:
	}
}

// Err is why the last check left the topology incomplete: the objects found missing that
// could not be recreated (no permission, say). It is nil after a check that found
// everything or recreated what was missing, and on a nil Healer. A look-up that failed
// (NATS down) is no verdict and is not reported: the connection's state says that.
func (h *Healer) Err() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Start checks at once and then until ctx ends, on a goroutine; done is closed after it
// stopped.
func (h *Healer) Start(ctx context.Context) (done <-chan struct{}) {
	d := make(chan struct{})
	go func() {
		defer close(d)
		tick := time.NewTicker(h.cfg.Interval)
		defer tick.Stop()
		for {
			h.Check(ctx)
			cooldown := time.NewTimer(healCooldown)
			select {
			case <-ctx.Done():
				cooldown.Stop()
				return
			case <-cooldown.C:
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-h.nudge:
			}
		}
	}()
	return d
}

// Check looks up every object of the topology and recreates each one missing, in order (a
// stream before its consumer); it returns, and keeps for Err, the errors of the
// recreations that failed.
func (h *Healer) Check(ctx context.Context) error {
	var errs []error
	for _, part := range h.topo.parts() {
		if ctx.Err() != nil {
			return ctx.Err() // stopping: keep the last verdict
		}
		if err := h.checkPart(ctx, part); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		err = fmt.Errorf("topology: %w", err)
	}
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	return err
}

// checkPart recreates part when it is missing.
func (h *Healer) checkPart(ctx context.Context, part topologyPart) error {
	octx, cancel := context.WithTimeout(ctx, h.cfg.OpTimeout)
	err := part.exists(octx)
	cancel()
	if err != nil && !errors.Is(err, errPartMissing) {
		h.log.Debug("could not check a part of the JetStream topology", "object", part.name, "err", err)
		return nil
	}
	if err == nil {
		return nil
	}
	h.log.Error("a part of the JetStream topology vanished; recreating it", "object", part.name, "err", err)
	octx, cancel = context.WithTimeout(ctx, h.cfg.OpTimeout)
	defer cancel()
	if err := part.ensure(octx); err != nil {
		h.log.Error("could not recreate a vanished part of the JetStream topology", "object", part.name, "err", err)
		return fmt.Errorf("recreate %s: %w", part.name, err)
	}
	h.cfg.Metrics.recreated(part.name)
	h.log.Warn("recreated a vanished part of the JetStream topology with its configuration", "object", part.name)
	return nil
}

// recreatedSeries makes la_topology_recreated_total show 0 for each of parts before any
// is recreated.
func (m *Metrics) recreatedSeries(parts []topologyPart) {
	if m != nil {
		for _, p := range parts {
			m.TopologyRecreated.WithLabelValues(p.name)
		}
	}
}

func (m *Metrics) recreated(object string) {
	if m != nil {
		m.TopologyRecreated.WithLabelValues(object).Inc()
	}
}
