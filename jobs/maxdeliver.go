package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/storage"
)

// MaxDeliveriesSubject is the advisory JetStream sends when a job message of the shared
// consumer has been delivered MaxDeliver times without an ack.
const MaxDeliveriesSubject = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + JobsStream + "." + ConsumerName

// maxDeliveriesQueue is the queue group of the advisory subscribers: one worker handles
// each advisory however many listen.
const maxDeliveriesQueue = "la-max-deliveries"

// maxDeliveriesAdvisory is the part of JetStream's advisory this package reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// DeadLetterConfig tunes a MaxDeliveriesWatcher; the fields mean what they mean in
// RunnerConfig, and Worker, DefaultOutput and OpTimeout are required.
type DeadLetterConfig struct {
	Worker        string
	DefaultOutput string
	OpTimeout     time.Duration
	Logger        *slog.Logger
	Metrics       *Metrics
}

// MaxDeliveriesWatcher ends the jobs that ran out of deliveries: for each max-deliveries
// advisory it reads the job message by stream sequence, writes a failed result
// (max_deliveries) and a dead-letter record, and removes the message from LA_JOBS.
// Advisories are core NATS messages: one sent while no worker listens is not seen, and the
// job message then stays in LA_JOBS for an operator (`submit dlq`) to find.
type MaxDeliveriesWatcher struct {
	sink *sink
	nc   *nats.Conn
}

// NewMaxDeliveriesWatcher prepares a watcher; Start subscribes.
func NewMaxDeliveriesWatcher(nc *nats.Conn, topo *Topology, store storage.Store, cfg DeadLetterConfig) (*MaxDeliveriesWatcher, error) {
	if nc == nil || topo == nil || store == nil {
		return nil, errors.New("new max-deliveries watcher: connection, topology and store are required")
	}
	switch {
	case !ValidToken(cfg.Worker):
		return nil, fmt.Errorf("new max-deliveries watcher: worker name %q: want 1-128 characters of [A-Za-z0-9_-]", cfg.Worker)
	case cfg.DefaultOutput == "":
		return nil, errors.New("new max-deliveries watcher: a default output prefix is required")
	case cfg.OpTimeout <= 0:
		return nil, fmt.Errorf("new max-deliveries watcher: op timeout %s must be positive", cfg.OpTimeout)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &MaxDeliveriesWatcher{nc: nc, sink: &sink{
		topo: topo, store: store, worker: cfg.Worker, defaultOutput: cfg.DefaultOutput,
		opTimeout: cfg.OpTimeout, log: log.With("component", "max-deliveries"), metrics: cfg.Metrics,
	}}, nil
}

// Start subscribes and returns once the subscription is in place; advisories are then
// handled one at a time on a goroutine until ctx ends (done is closed after it stopped).
func (w *MaxDeliveriesWatcher) Start(ctx context.Context) (done <-chan struct{}, err error) {
	ch := make(chan *nats.Msg, 64)
	sub, err := w.nc.ChanQueueSubscribe(MaxDeliveriesSubject, maxDeliveriesQueue, ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", MaxDeliveriesSubject, err)
	}
	if err := w.nc.FlushTimeout(w.sink.opTimeout); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to %s: %w", MaxDeliveriesSubject, err)
	}
	d := make(chan struct{})
	go func() {
		defer close(d)
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-ch:
				if err := w.handle(ctx, m.Data); err != nil {
					w.sink.log.Error("could not dead-letter a job that ran out of deliveries", "err", err)
				}
			}
		}
	}()
	return d, nil
}

func (w *MaxDeliveriesWatcher) handle(ctx context.Context, data []byte) error {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(data, &adv); err != nil {
		return fmt.Errorf("advisory is not valid JSON: %w", err)
	}
	if adv.Stream != JobsStream || adv.Consumer != ConsumerName {
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, w.sink.opTimeout)
	raw, err := w.sink.topo.Jobs.GetMsg(octx, adv.StreamSeq)
	cancel()
	if err != nil {
		return fmt.Errorf("read job message %d from %s: %w", adv.StreamSeq, JobsStream, err)
	}
	job, decodeErr := DecodeJob(raw.Data)
	if decodeErr != nil {
		job = fallbackJob(job, headerMsg{raw.Header}, adv.StreamSeq)
	}
	octx, cancel = context.WithTimeout(ctx, w.sink.opTimeout)
	st, seen, err := w.sink.topo.State.Get(octx, job.ID)
	cancel()
	if err != nil {
		return err
	}
	if !seen || !st.Status.Terminal() {
		res := newResult(job, int(adv.Deliveries))
		res.Status = StatusFailed
		res.Error = &ErrorInfo{Code: CodeMaxDeliveries, Message: fmt.Sprintf("gave up after %d deliveries without success", adv.Deliveries)}
		if st.LastError != "" {
			res.Error.Message += "; the last (worker " + st.Worker + "): " + st.LastError
		}
		orig := &original{data: raw.Data, subject: raw.Subject, streamSeq: adv.StreamSeq}
		if err := w.sink.finish(ctx, job, res, orig, true); err != nil {
			return fmt.Errorf("job %s: %w", job.ID, err)
		}
		w.sink.log.Warn("job dead-lettered after max deliveries", "id", job.ID, "deliveries", adv.Deliveries)
		w.sink.metrics.outcome(OutcomeFailed)
	}
	octx, cancel = context.WithTimeout(ctx, w.sink.opTimeout)
	defer cancel()
	if err := w.sink.topo.Jobs.DeleteMsg(octx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("remove dead-lettered job %s from %s: %w", job.ID, JobsStream, err)
	}
	return nil
}

// headerMsg lets fallbackJob read the Nats-Msg-Id of a message read by sequence.
type headerMsg struct{ h nats.Header }

func (m headerMsg) Headers() nats.Header { return m.h }
