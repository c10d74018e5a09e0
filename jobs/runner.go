package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/internal/imagemem"
	"github.com/locateanything/detect/storage"
)

// RunnerConfig tunes one Runner. The settings are required (RunnerTiming states the
// timing's defaults; the worker derives the rest); the fields after them are wiring.
type RunnerConfig struct {
	Worker        string // name in results, state and logs
	Prefetch      int    // job messages held at once, running or being prepared
	DefaultOutput string // result URL prefix for jobs without `output`
	MaxImageBytes int64  // image size limit; 0 = the store's own limit
	RunnerTiming         // grace, poll wait, retry delays, op timeout

	// Heartbeat is the InProgress period of held messages; 0 derives it from the consumer:
	// a third of its ack wait (or of its shortest back-off step when that is shorter).
	Heartbeat time.Duration
	Logger    *slog.Logger // nil discards
	Metrics   *Metrics     // nil records nothing
	Tracer    trace.Tracer // a span per job and per stage; nil records none
	Healer    *Healer      // nudged when a pull or a publish fails; nil: nothing recreates the topology

	// ImageMemory is the decoded-image budget every Runner of the process shares
	// (LA_MAX_DECODED_BYTES): a job reserves its image's decoded size in it before
	// decoding. nil gives this Runner a budget of its own of imagemem.DefaultSize().
	ImageMemory *imagemem.Budget

	// Now is the clock job deadlines are checked against; nil means time.Now. A test moves
	// it forward to let a deadline pass without waiting for it.
	Now func() time.Time
}

// validate reports the first required setting that is missing or makes no sense.
func (c RunnerConfig) validate() error {
	switch {
	case !ValidToken(c.Worker):
		return fmt.Errorf("worker name %q: want 1-128 characters of [A-Za-z0-9_-]", c.Worker)
	case c.DefaultOutput == "":
		return errors.New("a default output prefix is required")
	case c.Prefetch < 1:
		return fmt.Errorf("prefetch %d: must be at least 1", c.Prefetch)
	case c.MaxImageBytes < 0:
		return fmt.Errorf("max image bytes %d is negative", c.MaxImageBytes)
	}
	return c.RunnerTiming.Validate()
}

// Runner moves jobs from the shared consumer through one chip. Create one per chip.
type Runner struct {
	cfg    RunnerConfig
	tracer trace.Tracer
	topo   *Topology
	store  storage.Store
	chip   *chip.Chip
	sink   *sink
	log    *slog.Logger

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc // job id -> cancel, for cancel requests

	pullFailure pullHealth // why the last pull failed; Ready reports it
}

// NewRunner checks the configuration; Run starts the work.
func NewRunner(topo *Topology, store storage.Store, c *chip.Chip, cfg RunnerConfig) (*Runner, error) {
	if topo == nil || store == nil || c == nil {
		return nil, errors.New("new runner: topology, store and chip are required")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	// With a BackOff, JetStream redelivers a message on its n-th delivery BackOff[n-1]
	// after its last heartbeat instead of AckWait: the shortest of them all is the limit.
	ackWait := topo.Consumer.CachedInfo().Config.AckWait
	for _, step := range topo.Consumer.CachedInfo().Config.BackOff {
		ackWait = min(ackWait, step)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = ackWait / 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ImageMemory == nil {
		cfg.ImageMemory = imagemem.NewBudget(imagemem.DefaultSize())
	}
	if cfg.Heartbeat <= 0 || (ackWait > 0 && cfg.Heartbeat >= ackWait) {
		return nil, fmt.Errorf("new runner: heartbeat %s must be positive and shorter than the ack wait %s", cfg.Heartbeat, ackWait)
	}
	log := cfg.Logger.With("worker", cfg.Worker)
	return &Runner{
		cfg:    cfg,
		tracer: orNoop(cfg.Tracer),
		topo:   topo,
		store:  store,
		chip:   c,
		log:    log,
		sink: &sink{
			topo: topo, store: store, worker: cfg.Worker, defaultOutput: cfg.DefaultOutput,
			opTimeout: cfg.OpTimeout, log: log, metrics: cfg.Metrics, tracer: cfg.Tracer, healer: cfg.Healer,
		},
		running: make(map[string]context.CancelCauseFunc),
	}, nil
}

// Run pulls and runs jobs until ctx ends, then stops pulling, gives the jobs it holds
// Grace to finish, gives back (nak) what is still unfinished, and returns nil. It returns
// an error only when it cannot start.
func (r *Runner) Run(ctx context.Context) error {
	// Jobs run on workCtx, which outlives ctx by the grace period.
	workCtx, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)

	watchCtx, stopWatch := context.WithCancel(workCtx)
	watchDone, err := r.topo.State.WatchCancels(watchCtx, r.cancelRunning, func(err error) {
		r.log.Warn("cancel requests: watch lost", "err", err)
	})
	if err != nil {
		stopWatch()
		return fmt.Errorf("runner %s: %w", r.cfg.Worker, err)
	}
	defer func() { stopWatch(); <-watchDone }()

	var wg sync.WaitGroup
	slots := make(chan struct{}, r.cfg.Prefetch)
	r.pull(ctx, workCtx, slots, &wg)

	// Drain: in-flight jobs get the grace period, then their contexts are cancelled.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	grace := time.NewTimer(r.cfg.Grace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
		r.log.Warn("grace period over: giving back unfinished jobs", "grace", r.cfg.Grace)
		stopWork(ErrShuttingDown)
		<-drained
	}
	return nil
}

// pull fetches one message per free slot until ctx ends; each runs on its own goroutine.
func (r *Runner) pull(ctx, workCtx context.Context, slots chan struct{}, wg *sync.WaitGroup) {
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil {
			<-slots
			return
		}
		// No FetchContext: a message that arrives for a pull abandoned mid-wait would sit
		// unacknowledged until AckWait. A bounded wait keeps the stop latency at PollWait.
		msg, err := r.topo.Consumer.Next(jetstream.FetchMaxWait(r.cfg.PollWait))
		r.pullFailure.record(err)
		if err != nil {
			<-slots
			if !errors.Is(err, nats.ErrTimeout) {
				r.log.Warn("pull from the job queue failed; retrying", "err", err)
				r.cfg.Healer.Nudge() // the consumer or LA_JOBS may be gone
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return
				}
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			r.handle(workCtx, msg)
		}()
	}
}

// cancelRunning is called for every cancel request; it stops the job if it runs here.
func (r *Runner) cancelRunning(id string) {
	r.mu.Lock()
	cancel := r.running[id]
	r.mu.Unlock()
	if cancel != nil {
		cancel(ErrCancelRequested)
	}
}

func (r *Runner) register(id string, cancel context.CancelCauseFunc) (unregister func()) {
	r.mu.Lock()
	r.running[id] = cancel
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.running, id)
		r.mu.Unlock()
	}
}

// settlement is what happens to a message once its job is handled.
type settlement struct {
	kind   settleKind
	delay  time.Duration // nak
	reason string        // term
}

type settleKind int

const (
	settleAck settleKind = iota
	settleNak
	settleTerm
)

func (k settleKind) String() string {
	switch k {
	case settleAck:
		return "ack"
	case settleNak:
		return "nak"
	}
	return "term"
}

// handle runs one message from pull to ack. It keeps the message alive while it works.
func (r *Runner) handle(ctx context.Context, msg jetstream.Msg) {
	r.cfg.Metrics.held(1)
	defer r.cfg.Metrics.held(-1)
	attempt := 1
	if meta, err := msg.Metadata(); err == nil {
		attempt = int(meta.NumDelivered)
	}
	ctx, span := startJobSpan(ctx, r.tracer, msg.Headers(), msg.Subject(), attempt)

	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(r.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					r.log.Warn("heartbeat for a held job failed", "err", err)
				}
			}
		}
	}()

	s := r.process(ctx, msg)

	// Stop the heartbeat before settling, so no InProgress follows the ack or nak.
	stopHB()
	<-hbDone
	var err error
	switch s.kind {
	case settleAck:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.OpTimeout)
		err = msg.DoubleAck(actx)
		cancel()
	case settleNak:
		err = r.nak(ctx, msg, s.delay)
	case settleTerm:
		err = msg.TermWithReason(s.reason)
	}
	if err != nil {
		// The message comes back after AckWait; its terminal state short-circuits it then.
		r.log.Warn("settling a job message failed", "err", err)
	}
	span.SetAttributes(attribute.String("la.job.settled", s.kind.String()))
	endSpan(span, err)
}

// nak gives msg back for redelivery delay from now (0: at once) and returns once the
// server has taken it.
//
// JetStream reads a NAK's delay as an offset from "one ack wait ago", but when the consumer
// has a BackOff it compares the message's age with the BackOff step of the message's
// delivery count rather than with the ack wait (nats-server, consumer.go: processNak and
// checkPending). A plain NakWithDelay(d) on delivery n therefore comes back after
// d + BackOff[n-1] - AckWait: 70 s instead of 10 s on the second delivery with the
// defaults. nakDelay corrects the delay sent for that, which can make it negative, so the
// NAK is written by hand: NakWithDelay sends a plain NAK for any delay <= 0.
//
// A NAK with a delay also moves the message's timestamp in the consumer's stored state,
// while a plain NAK only puts the message on an in-memory redelivery queue that a server
// restart forgets (the embedded server stops with the worker: its given-back jobs would
// wait out a whole ack wait). So "at once" is sent as a delay too, and as a request: the
// server answers once it has processed the NAK, so a connection closed right after loses
// nothing.
func (r *Runner) nak(ctx context.Context, msg jetstream.Msg, delay time.Duration) error {
	delivered := 1
	if meta, err := msg.Metadata(); err == nil {
		delivered = int(meta.NumDelivered)
	}
	d := nakDelay(r.topo.Consumer.CachedInfo().Config, delivered, delay)
	body := fmt.Appendf(nil, `-NAK {"delay": %d}`, d.Nanoseconds())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.OpTimeout)
	defer cancel()
	if _, err := r.topo.JS.Conn().RequestWithContext(ctx, msg.Reply(), body); err != nil {
		return fmt.Errorf("nak: %w", err)
	}
	return nil
}

// nakDelay is the delay to put in a NAK of a message delivered n times so that JetStream
// redelivers it after want: the server redelivers once now - (t_nak - AckWait + delay)
// reaches the deadline of the delivery, BackOff[min(n, len)-1] when the consumer has a
// BackOff and AckWait otherwise.
func nakDelay(cc jetstream.ConsumerConfig, n int, want time.Duration) time.Duration {
	deadline := cc.AckWait
	if len(cc.BackOff) > 0 {
		deadline = cc.BackOff[max(min(n, len(cc.BackOff)), 1)-1]
	}
	return want + cc.AckWait - deadline
}

// attemptInfo is what one delivery knows before the job is decoded.
type attemptInfo struct {
	id      string // the job id, once decoded (or its fallback)
	start   time.Time
	attempt int
	orig    original
	timing  JobTiming
	owner   bool       // the message owns the job id (claimed): only then is the job's state written
	image   *imageHold // the image's share of the decoded-bytes budget, once reserved
}

// now is the time job deadlines are checked against.
func (r *Runner) now() time.Time {
	if r.cfg.Now != nil {
		return r.cfg.Now()
	}
	return time.Now()
}

// process runs the job in msg and decides how the message is settled.
func (r *Runner) process(ctx context.Context, msg jetstream.Msg) settlement {
	a := attemptInfo{start: time.Now(), attempt: 1, orig: original{data: msg.Data(), subject: msg.Subject()}}
	if meta, err := msg.Metadata(); err == nil {
		a.attempt = int(meta.NumDelivered)
		a.orig.streamSeq = meta.Sequence.Stream
		a.timing.QueueWait = ms(a.start.Sub(meta.Timestamp))
	}

	job, decodeErr := DecodeJob(msg.Data())
	if decodeErr != nil {
		job = fallbackJob(job, msg, a.orig.streamSeq)
	}
	a.id = job.ID
	log := r.log.With("id", job.ID, "attempt", a.attempt)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("la.job.id", job.ID), attribute.String("la.batch", job.Batch))

	// One message owns each job id (claim.go); no other one writes anything of the job's.
	if s, ok := r.claimed(ctx, log, job, &a, decodeErr); !ok {
		return s
	}

	// A job that already ended is not run again (a redelivery, or the same id resubmitted).
	octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	st, seen, err := r.topo.State.Get(octx, job.ID)
	cancel()
	if err != nil {
		return r.retry(ctx, log, a, fmt.Errorf("check job state: %w", err))
	}
	if seen && st.Status.Terminal() {
		log.Info("job already finished; acknowledging the repeat", "status", st.Status)
		r.cfg.Metrics.outcome(OutcomeDuplicate)
		return settlement{kind: settleAck}
	}
	if decodeErr != nil {
		code := CodeInvalidJob
		if ie, ok := engine.AsInputError(decodeErr); ok {
			code = ie.Code // a well-formed job this worker cannot run as asked (bad_generation_mode)
		}
		return r.fail(ctx, log, job, a, code, decodeErr)
	}
	if job.Deadline != nil && r.now().After(*job.Deadline) {
		return r.expired(ctx, log, job, a)
	}

	jobCtx, cancelJob := context.WithCancelCause(ctx)
	defer cancelJob(nil)
	defer r.register(job.ID, cancelJob)()
	octx, cancel = context.WithTimeout(ctx, r.cfg.OpTimeout)
	canceled, err := r.topo.State.CancelRequested(octx, job.ID)
	cancel()
	if err != nil {
		return r.retry(ctx, log, a, fmt.Errorf("check cancel request: %w", err))
	}
	if canceled {
		return r.canceled(ctx, log, job, a)
	}
	octx, cancel = context.WithTimeout(ctx, r.cfg.OpTimeout)
	err = r.topo.State.Put(octx, job.ID, State{Status: StatusRunning, Attempt: a.attempt, Worker: r.cfg.Worker})
	cancel()
	if err != nil {
		return r.retry(ctx, log, a, err)
	}

	defer func() { a.image.release() }() // with an overlay, held until it is drawn
	res, prep, pred, err := r.run(jobCtx, job, &a)
	if err != nil {
		return r.stopped(ctx, jobCtx, log, job, a, err)
	}
	if job.Overlay {
		t := time.Now()
		format := job.OverlayEncoding()
		var pic []byte
		_, span := r.tracer.Start(ctx, SpanOverlay, trace.WithAttributes(attribute.String("la.overlay_format", string(format))))
		err := r.noPanic("draw overlay", func() (err error) {
			pic, err = drawOverlay(prep, pred, format)
			return err
		})
		endSpan(span, err)
		if err != nil {
			return r.fail(ctx, log, job, a, CodeInternal, fmt.Errorf("draw overlay: %w", err))
		}
		uctx, span := r.tracer.Start(ctx, SpanUpload, trace.WithAttributes(attribute.String("la.object", "overlay")))
		url, err := r.sink.putOverlay(uctx, job, format, pic)
		endSpan(span, err)
		if err != nil {
			return r.stopped(ctx, jobCtx, log, job, a, err)
		}
		res.OverlayURL = &url
		res.OverlayFormat = format
		a.timing.Upload = ms(time.Since(t))
	}
	return r.finish(ctx, log, job, a, res, false)
}

// run fetches the image, prepares it and runs it on the chip.
func (r *Runner) run(ctx context.Context, job *Job, a *attemptInfo) (*Result, *engine.Prepared, *engine.Prediction, error) {
	t := time.Now()
	fctx, span := r.tracer.Start(ctx, SpanFetch)
	octx, cancel := context.WithTimeout(fctx, r.cfg.OpTimeout)
	img, err := r.store.Get(octx, job.Image, r.cfg.MaxImageBytes)
	cancel()
	span.SetAttributes(attribute.Int("la.image_bytes", len(img)))
	endSpan(span, err)
	if err != nil {
		return nil, nil, nil, classifyFetch(job.Image, err)
	}
	if len(img) == 0 {
		return nil, nil, nil, &jobError{code: CodeEmptyImage, err: fmt.Errorf("image %s is empty (0 bytes)", job.Image)}
	}
	a.timing.Fetch = ms(time.Since(t))
	if a.image, err = r.reserveImage(ctx, job, img); err != nil {
		return nil, nil, nil, err
	}

	r.cfg.Metrics.running(1)
	defer r.cfg.Metrics.running(-1)
	eng := r.chip.Engine()
	var prep *engine.Prepared
	pctx, span := r.tracer.Start(ctx, SpanPreprocess)
	err = r.noPanic("prepare", func() (err error) {
		prep, err = eng.Prepare(pctx, engine.Request{
			Image: img, Query: job.Query, Task: job.Task, MaxNewTokens: job.MaxNewTokens, GenerationMode: job.GenerationMode,
		})
		return err
	})
	endSpan(span, err)
	if err != nil {
		return nil, nil, nil, classifyEngine("prepare", err)
	}
	a.timing.Preprocess = prep.PreprocessMS
	if !job.Overlay { // only the overlay reads the decoded image: it need not wait for the chip
		prep.Image = nil
		a.image.release()
	}
	if job.Deadline != nil && r.now().After(*job.Deadline) {
		return nil, nil, nil, errExpired // it waited too long for a free slot or the fetch
	}
	called := time.Now()
	pred, started, err := r.chip.GenerateTimed(ctx, chip.Batch, prep)
	batch, tokens := 0, 0
	if pred != nil {
		batch, tokens = pred.Batch, pred.NumGeneratedTokens
	}
	chipSpans(ctx, r.tracer, called, started, time.Now(), batch, tokens, err)
	if err != nil {
		return nil, nil, nil, classifyEngine("generate", err)
	}
	a.timing.Vision = pred.TimingMS.Vision
	a.timing.Prefill = pred.TimingMS.Prefill
	a.timing.Decode = pred.TimingMS.Decode
	a.timing.DecodeTokS = pred.TimingMS.DecodeTokS
	res := newResult(job, a.attempt)
	res.Answer = answerOf(pred)
	r.cfg.Metrics.decoded(res.Answer)
	res.Model = eng.Info().Model
	res.Status = StatusSucceeded
	return res, prep, pred, nil
}

// noPanic runs host-side engine work on bytes from the outside world. A panic there (a
// decoder bug meeting a crafted image) fails this job for good instead of crashing the
// worker, which would make the message crash every worker it is redelivered to.
func (r *Runner) noPanic(step string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("engine panicked; failing the job", "step", step, "panic", p, "stack", string(debug.Stack()))
			err = &jobError{code: CodeInternal, err: fmt.Errorf("%s panicked: %v", step, p)}
		}
	}()
	return fn()
}

func classifyFetch(url string, err error) error {
	err = fmt.Errorf("fetch image %s: %w", url, err)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return &jobError{code: CodeNotFound, err: err}
	case errors.Is(err, storage.ErrTooLarge):
		return &jobError{code: engine.CodeImageTooLarge, err: err}
	case storage.Permanent(err): // a bad or refused URL, access denied, not a regular file
		return &jobError{code: CodeBadURL, err: err}
	}
	return transient(err)
}

func classifyEngine(step string, err error) error {
	var je *jobError
	if errors.As(err, &je) {
		return err // classified already (a panic)
	}
	err = fmt.Errorf("%s: %w", step, err)
	if ie, ok := engine.AsInputError(err); ok {
		return &jobError{code: ie.Code, err: err}
	}
	return transient(err) // engine busy, chip closing, device trouble: another try may work
}

// stopped settles a job that did not complete: cancelled by request, cut off by
// shutdown, failed for good (a *jobError), or failed for now (anything else).
func (r *Runner) stopped(ctx, jobCtx context.Context, log *slog.Logger, job *Job, a attemptInfo, err error) settlement {
	if jobCtx.Err() != nil {
		switch cause := context.Cause(jobCtx); {
		case errors.Is(cause, ErrCancelRequested):
			return r.canceled(ctx, log, job, a)
		case errors.Is(cause, ErrShuttingDown):
			log.Info("job given back unfinished at shutdown", "err", err)
			r.cfg.Metrics.outcome(OutcomeRequeued)
			return settlement{kind: settleNak}
		}
	}
	if errors.Is(err, errExpired) {
		return r.expired(ctx, log, job, a)
	}
	var je *jobError
	if errors.As(err, &je) {
		return r.fail(ctx, log, job, a, je.code, err)
	}
	return r.retry(ctx, log, a, err)
}

func (r *Runner) expired(ctx context.Context, log *slog.Logger, job *Job, a attemptInfo) settlement {
	return r.end(ctx, log, job, a, StatusExpired, &ErrorInfo{Code: CodeDeadline,
		Message: fmt.Sprintf("deadline %s passed before the job started", job.Deadline.Format(time.RFC3339))})
}

func (r *Runner) canceled(ctx context.Context, log *slog.Logger, job *Job, a attemptInfo) settlement {
	return r.end(ctx, log, job, a, StatusCanceled, &ErrorInfo{Code: CodeCanceled, Message: "cancel requested"})
}

// fail ends a job as failed for good: result, dead-letter record, TermWithReason.
func (r *Runner) fail(ctx context.Context, log *slog.Logger, job *Job, a attemptInfo, code string, err error) settlement {
	res := newResult(job, a.attempt)
	res.Status = StatusFailed
	res.Error = &ErrorInfo{Code: code, Message: err.Error()}
	s := r.finish(ctx, log, job, a, res, true)
	if s.kind == settleAck {
		return settlement{kind: settleTerm, reason: code + ": " + err.Error()}
	}
	return s
}

// end finishes a job that did not run (expired, canceled) and acks it.
func (r *Runner) end(ctx context.Context, log *slog.Logger, job *Job, a attemptInfo, status Status, why *ErrorInfo) settlement {
	res := newResult(job, a.attempt)
	res.Status = status
	res.Error = why
	return r.finish(ctx, log, job, a, res, false)
}

// finish stores and publishes res; the message is acked only when both succeeded.
func (r *Runner) finish(ctx context.Context, log *slog.Logger, job *Job, a attemptInfo, res *Result, deadLetter bool) settlement {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("la.job.status", string(res.Status)))
	if res.Error != nil {
		span.SetStatus(codes.Error, res.Error.Code+": "+res.Error.Message)
	}
	a.timing.Total = ms(time.Since(a.start))
	res.TimingMS = a.timing
	if err := r.sink.finish(ctx, job, res, &a.orig, deadLetter); err != nil {
		return r.retry(ctx, log, a, fmt.Errorf("store and publish the result: %w", err))
	}
	r.cfg.Metrics.outcome(string(res.Status))
	r.cfg.Metrics.stages(res.TimingMS)
	attrs := []any{"status", res.Status, "queue_wait_ms", a.timing.QueueWait, "fetch_ms", a.timing.Fetch,
		"preprocess_ms", a.timing.Preprocess, "vision_ms", a.timing.Vision, "prefill_ms", a.timing.Prefill,
		"decode_ms", a.timing.Decode, "upload_ms", a.timing.Upload, "total_ms", a.timing.Total}
	if res.Error != nil {
		attrs = append(attrs, "code", res.Error.Code, "reason", res.Error.Message)
		log.Warn("job ended", attrs...)
	} else {
		attrs = append(attrs, "detections", len(res.Detections), "points", len(res.Points), "tokens", res.NumGeneratedTokens)
		log.Info("job ended", attrs...)
	}
	return settlement{kind: settleAck}
}

// retry gives the message back with a delay that grows with each delivery. A shutdown
// that interrupts the work gives it back at once.
func (r *Runner) retry(ctx context.Context, log *slog.Logger, a attemptInfo, err error) settlement {
	if errors.Is(context.Cause(ctx), ErrShuttingDown) {
		r.cfg.Metrics.outcome(OutcomeRequeued)
		log.Info("job given back unfinished at shutdown", "err", err)
		return settlement{kind: settleNak}
	}
	delay := r.cfg.RetryDelay
	for i := 1; i < a.attempt && delay < r.cfg.RetryDelayMax; i++ {
		delay *= 2
	}
	delay = min(delay, r.cfg.RetryDelayMax)
	r.cfg.Metrics.outcome(OutcomeRetried)
	trace.SpanFromContext(ctx).SetStatus(codes.Error, "retry: "+err.Error())
	if last := r.topo.Consumer.CachedInfo().Config.MaxDeliver; last > 0 && a.attempt >= last {
		// No delivery follows: given back at once, the message reaches its max-deliveries
		// advisory (and the dead-letter queue) now rather than after one more delay.
		delay = 0
		log.Warn("job failed on its last delivery; it goes to the dead-letter queue", "err", err)
	} else {
		log.Warn("job failed for now; will retry", "err", err, "retry_in", delay)
	}
	if !a.owner {
		return settlement{kind: settleNak, delay: delay} // the id's state is not this message's to write
	}
	// Best effort, briefly: the state says why the job is waiting, and a dead-letter record
	// after the last delivery can say what kept failing. NATS itself may be what failed.
	sctx, cancel := context.WithTimeout(ctx, min(r.cfg.OpTimeout, 2*time.Second))
	defer cancel()
	if serr := r.topo.State.Put(sctx, a.id, State{Status: StatusQueued, Attempt: a.attempt, Worker: r.cfg.Worker, LastError: err.Error()}); serr != nil {
		log.Debug("could not record the retry in the job state", "err", serr)
	}
	return settlement{kind: settleNak, delay: delay}
}

// newResult is a result with the job's own fields filled in.
func newResult(job *Job, attempt int) *Result {
	return &Result{
		Answer:   emptyAnswer(job.Query),
		ID:       job.ID,
		Attempt:  attempt,
		Metadata: job.Metadata,
		Batch:    job.Batch,
		Image:    job.Image,
		Task:     job.Task,
	}
}

// fallbackJob makes a job that failed to decode addressable: its id if valid, else the
// Nats-Msg-Id if valid, else the worker-made SeqKey (seq=<stream sequence>), which no
// producer id can be; the default batch unless valid. Whichever id it gets, the message
// must claim it like any other (claim.go).
func fallbackJob(j *Job, msg interface{ Headers() nats.Header }, seq uint64) *Job {
	fb := &Job{}
	if j != nil {
		fb.Query, fb.Image, fb.Task = j.Query, j.Image, j.Task
		if ValidToken(j.ID) {
			fb.ID = j.ID
		}
		if ValidToken(j.Batch) {
			fb.Batch = j.Batch
		}
		if j.Output != "" {
			fb.Output = j.Output
		}
	}
	if fb.ID == "" {
		if h := msg.Headers().Get(nats.MsgIdHdr); ValidToken(h) {
			fb.ID = h
		} else {
			fb.ID = SeqKey(seq)
		}
	}
	if fb.Batch == "" {
		fb.Batch = DefaultBatch
	}
	return fb
}
