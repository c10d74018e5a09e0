package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// ensureTopologyAtStart applies the topology, waiting up to wait while JetStream does not
// answer yet. A server can accept a connection a moment before its JetStream API answers
// for the connection's account: an account a JWT resolver registers for two connections
// at once answers the second one's requests with "no responders" until the first one has
// subscribed the account's JetStream imports, and a cluster answers so until it has a meta
// leader. Those pass within moments; any other error, or still no answer after wait, ends
// the start.
func ensureTopologyAtStart(ctx context.Context, js jetstream.JetStream, cfg jobs.TopologyConfig, wait time.Duration, log *slog.Logger) (*jobs.Topology, error) {
	deadline := time.Now().Add(wait)
	delay := 50 * time.Millisecond
	for {
		topo, err := jobs.EnsureTopology(ctx, js, cfg)
		if err == nil || !jetStreamNotAnswering(err) {
			return topo, err
		}
		if time.Now().Add(delay).After(deadline) {
			return nil, fmt.Errorf("JetStream did not answer within %s (LA_NATS_TIMEOUT): %w", wait, err)
		}
		log.Debug("JetStream does not answer yet; retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (while waiting for JetStream: %w)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// jetStreamNotAnswering reports the errors of a JetStream that is not ready for the
// account yet.
func jetStreamNotAnswering(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}
