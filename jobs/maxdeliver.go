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

// The stream that keeps the max-deliveries advisories (work-queue retention: an advisory
// leaves it once a worker has dead-lettered its job) and the workers' shared consumer of
// it.
const (
	AdvisoryStream       = "LA_MAX_DELIVERIES"
	AdvisoryConsumerName = "la-dead-letter"
)

// maxDeliveriesAdvisory is the part of JetStream's advisory this package reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// DeadLetterConfig tunes a MaxDeliveriesWatcher; the fields mean what they mean in
// RunnerConfig, and Worker, DefaultOutput, PollWait and OpTimeout are required.
type DeadLetterConfig struct {
	Worker        string
	DefaultOutput string
	PollWait      time.Duration // how long one pull waits for an advisory (also the stop latency)
	OpTimeout     time.Duration
	Logger        *slog.Logger
	Metrics       *Metrics
	Healer        *Healer // told when the advisory consumer cannot be read; nil: none
}

// MaxDeliveriesWatcher ends the jobs that ran out of deliveries: for each max-deliveries
// advisory it reads the job message by stream sequence, writes a failed result
// (max_deliveries) and a dead-letter record, and removes the message from LA_JOBS.
//
// JetStream sends the advisory once and never delivers the job message again, so the
// advisories are kept in a stream of their own (AdvisoryStream, made by EnsureTopology)
// and read through a durable consumer that every worker's watcher shares: one sent while
// no worker runs, or in a burst larger than any worker keeps up with, waits there. Each
// advisory goes to one watcher at a time; one whose handling fails for now (storage or
// NATS down) is given back to the stream and tried again, waiting longer each time (1 s,
// doubling, at most a minute), until it succeeds; one held by a watcher that stops or
// dies comes back after the ack wait, to any watcher. A second handling of an advisory
// writes nothing twice (handle).
type MaxDeliveriesWatcher struct {
	sink     *sink
	nc       *nats.Conn
	pollWait time.Duration
	healer   *Healer

	// retryDelay is the wait before the first retry of an advisory, doubling per try up to
	// retryDelayMax.
	retryDelay, retryDelayMax time.Duration
}

// The retry schedule of advisories that could not be handled: 1 s, 2 s, 4 s, ... 1 min.
const (
	deadLetterRetryDelay    = time.Second
	deadLetterRetryDelayMax = time.Minute
)

// NewMaxDeliveriesWatcher prepares a watcher that reads the advisories over nc; Start
// begins.
func NewMaxDeliveriesWatcher(nc *nats.Conn, topo *Topology, store storage.Store, cfg DeadLetterConfig) (*MaxDeliveriesWatcher, error) {
	if nc == nil || topo == nil || store == nil {
		return nil, errors.New("new max-deliveries watcher: connection, topology and store are required")
	}
	switch {
	case !ValidToken(cfg.Worker):
		return nil, fmt.Errorf("new max-deliveries watcher: worker name %q: want 1-128 characters of [A-Za-z0-9_-]", cfg.Worker)
	case cfg.DefaultOutput == "":
		return nil, errors.New("new max-deliveries watcher: a default output prefix is required")
	case cfg.OpTimeout <= 0 || cfg.PollWait <= 0:
		return nil, fmt.Errorf("new max-deliveries watcher: op timeout %s and poll wait %s must be positive", cfg.OpTimeout, cfg.PollWait)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &MaxDeliveriesWatcher{nc: nc, pollWait: cfg.PollWait, healer: cfg.Healer, sink: &sink{
		topo: topo, store: store, worker: cfg.Worker, defaultOutput: cfg.DefaultOutput,
		opTimeout: cfg.OpTimeout, log: log.With("component", "max-deliveries"), metrics: cfg.Metrics,
		lastWord: true,
		healer:   cfg.Healer,
	}, retryDelay: deadLetterRetryDelay, retryDelayMax: deadLetterRetryDelayMax}, nil
}

// Start looks up the advisory consumer and returns once it is found; advisories are then
// pulled and handled one at a time on a goroutine until ctx ends (done is closed after it
// stopped). An advisory being handled when ctx ends is given back to the stream.
func (w *MaxDeliveriesWatcher) Start(ctx context.Context) (done <-chan struct{}, err error) {
	js, err := jetstream.New(w.nc)
	if err != nil {
		return nil, fmt.Errorf("max-deliveries watcher: jetstream: %w", err)
	}
	octx, cancel := context.WithTimeout(ctx, w.sink.opTimeout)
	cons, err := js.Consumer(octx, AdvisoryStream, AdvisoryConsumerName)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("max-deliveries watcher: consumer %s on %s: %w", AdvisoryConsumerName, AdvisoryStream, err)
	}
	heartbeat := cons.CachedInfo().Config.AckWait / 3
	d := make(chan struct{})
	go func() {
		defer close(d)
		for ctx.Err() == nil {
			// Bounded waits rather than a context: a pull abandoned mid-wait could strand an
			// advisory until the ack wait.
			msg, err := cons.Next(jetstream.FetchMaxWait(w.pollWait))
			if err != nil {
				if !errors.Is(err, nats.ErrTimeout) {
					w.sink.log.Warn("pull from the max-deliveries advisories failed; retrying", "err", err)
					w.healer.Nudge()
					select {
					case <-time.After(time.Second):
					case <-ctx.Done():
					}
				}
				continue
			}
			w.settle(ctx, msg, heartbeat)
		}
	}()
	return d, nil
}

// settle handles one advisory message, keeping it alive meanwhile, and acks it, or gives
// it back for a later try when its job could not be dead-lettered yet.
func (w *MaxDeliveriesWatcher) settle(ctx context.Context, msg jetstream.Msg, heartbeat time.Duration) {
	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		if heartbeat <= 0 {
			return
		}
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	seq, err := w.handle(ctx, msg.Data())
	stopHB()
	<-hbDone

	tries := 1
	if meta, merr := msg.Metadata(); merr == nil {
		tries = int(meta.NumDelivered)
	}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.sink.opTimeout)
	defer cancel()
	var gone *adviceGone
	switch {
	case err == nil:
		err = msg.DoubleAck(octx)
	case errors.As(err, &gone):
		w.sink.log.Warn("max-deliveries advisory dropped", "stream_seq", seq, "tries", tries, "err", err)
		err = msg.DoubleAck(octx)
	case ctx.Err() != nil:
		w.sink.log.Info("stopping: max-deliveries advisory given back for another worker", "stream_seq", seq, "err", err)
		err = msg.Nak()
	default:
		wait := w.retryDelay
		for i := 1; i < tries && wait < w.retryDelayMax; i++ {
			wait *= 2
		}
		wait = min(wait, w.retryDelayMax)
		w.sink.log.Warn("could not dead-letter a job that ran out of deliveries yet; will retry",
			"stream_seq", seq, "tries", tries, "retry_in", wait, "err", err)
		err = msg.NakWithDelay(wait)
	}
	if err != nil {
		// It comes back after the ack wait; handling it again writes nothing twice.
		w.sink.log.Warn("settling a max-deliveries advisory failed", "stream_seq", seq, "err", err)
	}
}

// adviceGone is an advisory no retry can handle: not an advisory, or its job message is
// no longer in LA_JOBS.
type adviceGone struct{ err error }

func (e *adviceGone) Error() string { return e.err.Error() }
func (e *adviceGone) Unwrap() error { return e.err }

// handle dead-letters the job of one advisory and returns the job message's stream
// sequence. Every step can be repeated: a retry after a partial success, or a second
// watcher handling the same advisory, writes nothing twice (finish is keyed by the job and
// its stream sequence), and a job whose state is terminal is only removed from LA_JOBS.
func (w *MaxDeliveriesWatcher) handle(ctx context.Context, data []byte) (seq uint64, err error) {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(data, &adv); err != nil {
		return 0, &adviceGone{fmt.Errorf("advisory is not valid JSON: %w", err)}
	}
	if adv.Stream != JobsStream || adv.Consumer != ConsumerName {
		return 0, nil
	}
	return adv.StreamSeq, w.deadLetter(ctx, adv)
}

// deadLetter ends the job of one advisory.
func (w *MaxDeliveriesWatcher) deadLetter(ctx context.Context, adv maxDeliveriesAdvisory) error {
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
