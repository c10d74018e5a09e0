package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
// JetStream sends the advisory once and never delivers the message again, so an advisory
// whose handling fails for now (storage or NATS down) is kept and tried again, waiting
// longer each time, until it succeeds or the watcher stops.
// Advisories are core NATS messages: one sent while no worker listens is not seen (nor one
// still waiting for another try when the watcher stops), and the job message then stays in
// LA_JOBS for an operator (`submit dlq`) to find.
type MaxDeliveriesWatcher struct {
	sink *sink
	nc   *nats.Conn

	// retryDelay is the wait before the first retry of an advisory, doubling per try up to
	// retryDelayMax.
	retryDelay, retryDelayMax time.Duration
}

// The retry schedule of advisories that could not be handled: 1 s, 2 s, 4 s, ... 1 min.
const (
	deadLetterRetryDelay    = time.Second
	deadLetterRetryDelayMax = time.Minute
)

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
		lastWord: true,
	}, retryDelay: deadLetterRetryDelay, retryDelayMax: deadLetterRetryDelayMax}, nil
}

// Start subscribes and returns once the subscription is in place; advisories are then
// handled one at a time on a goroutine until ctx ends (done is closed after it stopped).
// That goroutine also keeps the advisories waiting for another try, in order of when each
// is due.
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
		var retries []*advisoryTry // by due time
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		for {
			var due <-chan time.Time
			if len(retries) > 0 {
				timer.Reset(time.Until(retries[0].due))
				due = timer.C
			}
			select {
			case <-ctx.Done():
				for _, r := range retries {
					w.sink.log.Error("not dead-lettered: the worker stopped before the job's result and record could be written; its message stays in "+JobsStream,
						"stream_seq", r.seq, "tries", r.tries, "err", r.err)
				}
				return
			case m := <-ch:
				retries = w.try(ctx, &advisoryTry{data: m.Data}, retries)
			case <-due:
				next := retries[0]
				retries = w.try(ctx, next, retries[1:])
			}
		}
	}()
	return d, nil
}

// advisoryTry is an advisory and how handling it went so far.
type advisoryTry struct {
	data  []byte
	seq   uint64 // the job message's stream sequence, once read
	tries int
	due   time.Time
	err   error // of the last try
}

// try handles a and returns retries with a added back, due later, when it failed for now.
func (w *MaxDeliveriesWatcher) try(ctx context.Context, a *advisoryTry, retries []*advisoryTry) []*advisoryTry {
	a.tries++
	a.err = w.handle(ctx, a)
	if a.err == nil || ctx.Err() != nil {
		return retries
	}
	var gone *adviceGone
	if errors.As(a.err, &gone) {
		w.sink.log.Warn("max-deliveries advisory dropped", "stream_seq", a.seq, "tries", a.tries, "err", a.err)
		return retries
	}
	wait := w.retryDelay
	for i := 1; i < a.tries && wait < w.retryDelayMax; i++ {
		wait *= 2
	}
	wait = min(wait, w.retryDelayMax)
	a.due = time.Now().Add(wait)
	w.sink.log.Warn("could not dead-letter a job that ran out of deliveries yet; will retry",
		"stream_seq", a.seq, "tries", a.tries, "retry_in", wait, "err", a.err)
	i, _ := slices.BinarySearchFunc(retries, a.due, func(r *advisoryTry, t time.Time) int { return r.due.Compare(t) })
	return slices.Insert(retries, i, a)
}

// adviceGone is an advisory no retry can handle: not an advisory, or its job message is
// no longer in LA_JOBS.
type adviceGone struct{ err error }

func (e *adviceGone) Error() string { return e.err.Error() }
func (e *adviceGone) Unwrap() error { return e.err }

// handle dead-letters the job of one advisory. Every step can be repeated: a retry after a
// partial success writes nothing twice (finish is keyed by the job and its stream
// sequence), and a job whose state is terminal is only removed from LA_JOBS.
func (w *MaxDeliveriesWatcher) handle(ctx context.Context, a *advisoryTry) error {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(a.data, &adv); err != nil {
		return &adviceGone{fmt.Errorf("advisory is not valid JSON: %w", err)}
	}
	if adv.Stream != JobsStream || adv.Consumer != ConsumerName {
		return nil
	}
	a.seq = adv.StreamSeq
	octx, cancel := context.WithTimeout(ctx, w.sink.opTimeout)
	raw, err := w.sink.topo.Jobs.GetMsg(octx, adv.StreamSeq)
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return &adviceGone{fmt.Errorf("job message %d is no longer in %s: %w", adv.StreamSeq, JobsStream, err)}
	}
	if err != nil {
		return fmt.Errorf("read job message %d from %s: %w", adv.StreamSeq, JobsStream, err)
	}
	job, decodeErr := DecodeJob(raw.Data)
	if decodeErr != nil {
		job = fallbackJob(job, headerMsg{raw.Header}, adv.StreamSeq)
	}
	orig := &original{data: raw.Data, subject: raw.Subject, streamSeq: adv.StreamSeq}
	// A message that does not own its job id ends as the Runner ends it (claim.go).
	outcome, _, err := w.sink.settleClaim(ctx, job, orig, int(adv.Deliveries), decodeErr)
	if err != nil {
		return err
	}
	octx, cancel = context.WithTimeout(ctx, w.sink.opTimeout)
	st, seen, err := w.sink.topo.State.Get(octx, job.ID)
	cancel()
	if err != nil {
		return err
	}
	if outcome == claimOwned && (!seen || !st.Status.Terminal()) {
		res := newResult(job, int(adv.Deliveries))
		res.Status = StatusFailed
		res.Error = &ErrorInfo{Code: CodeMaxDeliveries, Message: fmt.Sprintf("gave up after %d deliveries without success", adv.Deliveries)}
		if st.LastError != "" {
			res.Error.Message += "; the last (worker " + st.Worker + "): " + st.LastError
		}
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
