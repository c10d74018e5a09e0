package submit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsconn"
	"github.com/locateanything/detect/storage"
)

// RunConfig is one `submit run`.
type RunConfig struct {
	Inputs   []string    // files, directories, globs, manifests, s3:// or file:// prefixes
	Defaults JobDefaults // query, task, budget, overlay, batch ("" = resume or new), output
	Class    string      // job class: published on la.jobs.<class>; "" = default
	OutDir   string      // output directory (results.jsonl, state, overlays, COCO)
	// UploadPrefix is where local images are uploaded (s3://bucket/prefix/); "" passes them
	// as file:// URLs for a worker on the same machine.
	UploadPrefix  string
	Concurrency   int           // images read, hashed and uploaded at once; 0 = 4
	MaxInFlight   int           // unacknowledged publishes; 0 = 64
	MaxImageBytes int64         // local images over this are refused; 0 = 64 MiB
	COCO          bool          // write detections.coco.json
	Rehash        bool          // read every local image again, ignoring the hashes an earlier run recorded
	Backoff       Backoff       // publish retry; zero = DefaultBackoff
	ProgressEvery time.Duration // plain progress line period off a terminal; 0 = 10 s

	dryRun bool // plan only (DryRun): read the output directory, write, upload and publish nothing
	// Listed is Inputs already listed (Expand), by a caller that had to know they exist
	// before connecting anywhere; nil: Run lists them.
	Listed []Item
}

// Env is what a run talks to.
type Env struct {
	JS       jetstream.JetStream
	Store    storage.Store // nil when no storage is configured
	Progress io.Writer     // where the progress bar or lines go; nil for none
	Terminal bool          // Progress is a terminal: draw a bar
	Log      *slog.Logger  // warnings (publish retries, unreadable results); nil discards
}

// Summary is the outcome of a run. Succeeded and Failed count the whole set, including
// jobs that finished in an earlier run, so a rerun reports the same failures again.
type Summary struct {
	Batch       string
	Total       int // distinct jobs in the input set
	Submitted   int // published in this run
	AlreadyDone int // finished before this run started
	Succeeded   int
	Failed      int // failed, canceled or expired
	Collected   int // results received in this run
	// Latencies are the queue-to-finish times (the worker's queue_wait + total) of the
	// results collected in this run.
	Latencies   []time.Duration
	Elapsed     time.Duration
	Interrupted bool // ended by ctx before every result arrived
	// Failures are the first MaxListedFailures jobs of the set that did not succeed, in
	// the order their results were read; FailedFile lists them all.
	Failures []Failure
	// FailedFile is the output directory's FailedFile when some job failed, else "".
	FailedFile string
	// Warnings are the run's distinct warnings in the order first seen: those of the
	// results (a query the worker ran as written but that looks wrong), counted once per
	// text, and the run's own (the COCO export's).
	Warnings []Warning
}

// MaxListedFailures is how many failed jobs the summary names; the output directory's
// FailedFile lists every one.
const MaxListedFailures = 10

// Failure is a job of the set that did not succeed: its input and why.
type Failure struct {
	ID      string      `json:"id"`
	Source  string      `json:"source"`         // the path, URL or manifest line it came from
	File    string      `json:"file,omitempty"` // its path below its input
	Status  jobs.Status `json:"status"`         // failed, canceled or expired
	Code    string      `json:"code,omitempty"`
	Message string      `json:"message,omitempty"`
}

// String is the failure on one line: its input, its code (or status) and message.
func (f Failure) String() string {
	code := f.Code
	if code == "" {
		code = string(f.Status)
	}
	if f.Message == "" {
		return fmt.Sprintf("%s: %s", f.Source, code)
	}
	return fmt.Sprintf("%s: %s: %s", f.Source, code, f.Message)
}

// Warning is one distinct warning and how many jobs gave it (0: a warning of the run).
type Warning struct {
	Text string
	Jobs int
}

// String is the warning with the number of jobs it concerns.
func (w Warning) String() string {
	switch w.Jobs {
	case 0:
		return w.Text
	case 1:
		return w.Text + " (1 job)"
	default:
		return fmt.Sprintf("%s (%d jobs)", w.Text, w.Jobs)
	}
}

// Pending is the number of jobs without a result.
func (s Summary) Pending() int { return s.Total - s.Succeeded - s.Failed }

// String is the two summary lines: counts, then latency and throughput.
func (s Summary) String() string {
	line1 := fmt.Sprintf("%d submitted, %d already done, %d succeeded, %d failed", s.Submitted, s.AlreadyDone, s.Succeeded, s.Failed)
	if p := s.Pending(); p > 0 {
		line1 += fmt.Sprintf(" (%d still pending: rerun the same command to resume)", p)
	}
	rate := 0.0
	if secs := s.Elapsed.Seconds(); secs > 0 {
		rate = float64(s.Collected) / secs
	}
	line2 := fmt.Sprintf("latency p50 %s p95 %s over %d jobs, throughput %.2f jobs/s (%d results in %s)",
		fmtDuration(percentile(s.Latencies, 50)), fmtDuration(percentile(s.Latencies, 95)),
		len(s.Latencies), rate, s.Collected, s.Elapsed.Round(time.Millisecond))
	return line1 + "\n" + line2
}

// Problems is what the run wants the user to see beside the counts: each warning once,
// then the failed jobs with their codes (the first MaxListedFailures, and where the whole
// list is). It is empty when every job succeeded without a warning.
func (s Summary) Problems() string {
	var b strings.Builder
	for _, w := range s.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if s.Failed > 0 && len(s.Failures) > 0 {
		fmt.Fprintf(&b, "%d failed:\n", s.Failed)
		for _, f := range s.Failures {
			fmt.Fprintf(&b, "  %s\n", f)
		}
		if s.Failed > len(s.Failures) {
			fmt.Fprintf(&b, "  ... and %d more\n", s.Failed-len(s.Failures))
		}
		if s.FailedFile != "" {
			fmt.Fprintf(&b, "every failed job: %s\n", s.FailedFile)
		}
	}
	return b.String()
}

func fmtDuration(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// percentile is the nearest-rank percentile of ds (0 when empty).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(rank, 1)-1]
}

// Run submits the input set and collects its results into cfg.OutDir. It returns when every
// job has a result, on a fatal error, or when ctx ends (then with ErrInterrupted); the
// summary is valid in every case. A rerun with the same inputs and output directory
// publishes nothing that an earlier run published or finished.
func Run(ctx context.Context, cfg RunConfig, env Env) (Summary, error) {
	r, err := newBatchRun(ctx, cfg, env)
	if err != nil {
		return Summary{}, err
	}
	return r.execute(ctx)
}

// planned is a job made from an item, with what the state bucket knew about it.
type planned struct {
	job      *jobs.Job
	source   string
	rel      string // the image's path below its input
	stem     string // where its files go, before localName
	shared   bool
	state    jobs.State
	hasState bool // the state bucket has an entry: published before, do not publish again
	err      error
}

type published struct {
	job *jobs.Job
	dup bool
	err error
}

// batchRun is the state of one Run. Its maps belong to the loop goroutine alone.
type batchRun struct {
	cfg   RunConfig
	env   Env
	log   *slog.Logger
	out   *outDir
	prior *outState
	state *jobs.StateStore
	items []Item
	start time.Time

	sum      Summary
	expected map[string]expectedJob // by job id, every job of this run's set
	done     map[string]bool        // with a row in results.jsonl
	early    map[string]jobs.Result
	// replayed holds jobs whose row says failed but which were published again since
	// (submit dlq replay): only a result finished after the time held counts.
	replayed map[string]time.Time
	// failures are the set's jobs that did not succeed, as their rows were read;
	// warnings index the summary's warnings by text.
	failures []Failure
	warnings map[string]int
	// lostAt is when the NATS connection was found lost; zero while it is up. natsLost
	// says the same to the publishers' goroutines.
	lostAt   time.Time
	natsLost atomic.Bool
}

// watchNATS says when the NATS connection is lost and when it is back: nats.go reconnects
// by itself, and meanwhile nothing is published or collected, which the progress line
// alone would show as a run that merely stalled.
func (r *batchRun) watchNATS(prog *progress) {
	if r.env.JS == nil {
		return
	}
	nc := r.env.JS.Conn()
	up := nc.Status() == nats.CONNECTED
	switch {
	case !up && r.lostAt.IsZero():
		r.lostAt = time.Now()
		r.natsLost.Store(true)
		prog.say("NATS connection lost: nothing is published or collected until it is back (the jobs already queued go on); retrying")
	case up && !r.lostAt.IsZero():
		prog.say("NATS connection back after %s (%s); going on", time.Since(r.lostAt).Round(time.Second), natsconn.RedactURL(nc.ConnectedUrl()))
		r.lostAt = time.Time{}
		r.natsLost.Store(false)
	}
}

// newBatchRun checks cfg and fills in its defaults, opens the output directory (resuming the
// batch it belongs to), lists the inputs and opens the state bucket. Nothing is published.
func newBatchRun(ctx context.Context, cfg RunConfig, env Env) (*batchRun, error) {
	if cfg.OutDir == "" {
		return nil, errors.New("an output directory is required (--out)")
	}
	if len(cfg.Inputs) == 0 {
		return nil, errors.New("no inputs: name image files, directories, globs, manifests or s3:// prefixes")
	}
	if cfg.Class == "" {
		cfg.Class = jobs.DefaultClass
	}
	if !jobs.ValidToken(cfg.Class) {
		return nil, &ArgumentError{Err: fmt.Errorf("class %q must be 1-128 characters of [A-Za-z0-9_-]", cfg.Class)}
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.MaxImageBytes <= 0 {
		cfg.MaxImageBytes = 64 << 20
	}
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.UploadPrefix != "" && env.Store == nil {
		return nil, fmt.Errorf("upload prefix %s: storage is not configured (set LA_S3_ENDPOINT and the other LA_S3_* variables)", cfg.UploadPrefix)
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &batchRun{cfg: cfg, env: env, log: log, start: time.Now(),
		expected: map[string]expectedJob{}, done: map[string]bool{},
		early: map[string]jobs.Result{}, replayed: map[string]time.Time{}, warnings: map[string]int{}}

	// The inputs and their queries first: a mistake in them is the user's to fix, and
	// must be said before an output directory or a batch exists.
	var err error
	if r.items = cfg.Listed; r.items == nil {
		if r.items, err = Expand(ctx, cfg.Inputs, env.Store); err != nil {
			return nil, &ArgumentError{Err: err}
		}
	}
	if err := CheckQueries(r.items, cfg.Defaults); err != nil {
		return nil, err
	}

	var out *outDir
	var prior *outState
	if cfg.dryRun {
		prior, err = readOutState(cfg.OutDir, false)
	} else {
		out, prior, err = openOutDir(cfg.OutDir)
	}
	if err != nil {
		return nil, err
	}
	r.out, r.prior = out, prior
	fail := func(err error) (*batchRun, error) {
		if out != nil {
			out.close()
		}
		return nil, err
	}

	batch, err := resolveBatch(cfg.Defaults.Batch, prior, cfg.OutDir)
	if err != nil {
		return fail(err)
	}
	r.cfg.Defaults.Batch, r.sum.Batch = batch, batch
	if !prior.HasHeader && out != nil {
		if err := out.writeHeader(stateHeader{Batch: batch, Class: cfg.Class}); err != nil {
			return fail(err)
		}
	}

	assignStems(r.items, r.cfg.Defaults)
	if env.JS == nil && cfg.dryRun {
		return r, nil // a dry run without NATS: the output directory is all the evidence
	}
	for _, name := range []string{jobs.JobsStream, jobs.ResultsStream} {
		if _, err := env.JS.Stream(ctx, name); err != nil {
			return fail(fmt.Errorf("stream %s: %w (start a worker once: it creates the streams)", name, err))
		}
	}
	kv, err := env.JS.KeyValue(ctx, jobs.StateBucket)
	if err != nil {
		return fail(fmt.Errorf("state bucket %s: %w (start a worker once: it creates the bucket)", jobs.StateBucket, err))
	}
	r.state = jobs.NewStateStore(kv)
	return r, nil
}

// CheckQueries refuses a set in which an image has no query (every task needs one: none
// given to --query, none on its manifest line) or one longer than a job may carry, naming
// the first such image and how many there are.
func CheckQueries(items []Item, d JobDefaults) error {
	var missing, long []string
	for _, it := range items {
		switch q := effectiveQuery(it, d); {
		case q == "":
			missing = append(missing, it.Origin)
		case utf8.RuneCountInString(q) > jobs.MaxQueryChars:
			long = append(long, it.Origin)
		}
	}
	switch {
	case len(missing) > 0:
		return &ArgumentError{Err: fmt.Errorf("no query for %s%s: give --query, or a query on each manifest line",
			missing[0], more(len(missing)-1, "image"))}
	case len(long) > 0:
		return &ArgumentError{Err: fmt.Errorf("the query of %s%s is longer than %d characters",
			long[0], more(len(long)-1, "image"), jobs.MaxQueryChars)}
	}
	return nil
}

// more is " and N more <what>s", or "" for none.
func more(n int, what string) string {
	switch n {
	case 0:
		return ""
	case 1:
		return " and 1 more " + what
	}
	return fmt.Sprintf(" and %d more %ss", n, what)
}

// resolveBatch picks the batch: the flag, else the one the output directory belongs to,
// else a new name. An output directory holds one batch; a different --batch is an error.
func resolveBatch(flag string, prior *outState, dir string) (string, error) {
	if flag != "" && !jobs.ValidToken(flag) {
		return "", &ArgumentError{Err: fmt.Errorf("batch %q must be 1-128 characters of [A-Za-z0-9_-]", flag)}
	}
	if prior.HasHeader {
		if flag != "" && flag != prior.Header.Batch {
			return "", &ArgumentError{Err: fmt.Errorf("output directory %s belongs to batch %s, not %s: use another --out, or drop --batch to resume it", dir, prior.Header.Batch, flag)}
		}
		return prior.Header.Batch, nil
	}
	if flag != "" {
		return flag, nil
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new batch name: %w", err)
	}
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:]), nil
}

// execute plans, publishes and collects until every job of the set has a result, a fatal
// error occurs or parent ends; it closes the output directory and returns the summary in
// every case.
func (r *batchRun) execute(parent context.Context) (sum Summary, err error) {
	defer func() {
		if ferr := r.writeFailures(); err == nil && ferr != nil {
			err = ferr
		}
		if cerr := r.out.close(); err == nil && cerr != nil {
			err = cerr
		}
		sum = r.sum
		sum.Elapsed = time.Since(r.start)
	}()
	ctx, cancel := context.WithCancel(parent)
	// Publishers outlive an interrupt by up to publishDrain, so that a job JetStream has
	// stored is also recorded as published.
	pubCtx, stopPublishing := context.WithCancel(context.WithoutCancel(parent))
	var wg sync.WaitGroup
	defer wg.Wait() // every goroutine below ends once ctx and pubCtx are cancelled
	defer stopPublishing()
	defer cancel()

	plannedCh := r.startPlanners(ctx, &wg)
	pubCh := make(chan *jobs.Job)
	pubDone := make(chan published)
	r.startPublishers(pubCtx, &wg, pubCh, pubDone)
	resultsCh := make(chan collected, 64)
	wg.Go(func() { collectResults(ctx, r.env.JS, r.env.Store, r.cfg.Defaults.Batch, resultsCh) })

	prog := &progress{w: r.env.Progress, terminal: r.env.Terminal}
	defer prog.finish()
	redraw := time.Second
	if !r.env.Terminal {
		redraw = r.cfg.ProgressEvery
	}
	tick := time.NewTicker(redraw)
	defer tick.Stop()
	syncTick := time.NewTicker(time.Second)
	defer syncTick.Stop()

	r.sum.Total = len(r.items)
	var queue []*jobs.Job // planned, waiting for a free publisher
	inFlight := 0
	planning := true
	var lastReadErr error // the collector's latest complaint, for when it gives up
	for {
		if !planning && len(queue) == 0 && inFlight == 0 && r.pending() == 0 {
			break
		}
		var sendCh chan *jobs.Job
		var next *jobs.Job
		if len(queue) > 0 {
			sendCh, next = pubCh, queue[0]
		}
		select {
		case <-parent.Done():
			r.sum.Interrupted = true
			cancel() // planning and collecting stop now
			err := r.drainPublishes(pubDone, inFlight)
			prog.update(r.snapshot(planning))
			return r.sum, errors.Join(fmt.Errorf("%w: %w", ErrInterrupted, parent.Err()), err)
		case p, ok := <-plannedCh:
			if !ok {
				planning, plannedCh = false, nil
				r.early = nil // results of jobs outside this set
				continue
			}
			if p.err != nil {
				return r.sum, p.err
			}
			publish, err := r.admit(ctx, p)
			if err != nil {
				return r.sum, err
			}
			if publish {
				queue = append(queue, p.job)
			}
		case sendCh <- next:
			queue = queue[1:]
			inFlight++
		case p := <-pubDone:
			inFlight--
			if err := r.published(p); err != nil {
				return r.sum, err
			}
		case c, ok := <-resultsCh:
			if !ok {
				return r.sum, fmt.Errorf("results of batch %s: the reader stopped: %w", r.cfg.Defaults.Batch, lastReadErr)
			}
			if c.Err != nil {
				lastReadErr = c.Err
				if r.lostAt.IsZero() { // while NATS is lost, the lost line says it once
					r.log.Warn("reading results", "err", c.Err)
				}
				continue
			}
			if err := r.receive(ctx, c.Result, planning); err != nil {
				return r.sum, err
			}
		case <-syncTick.C:
			if err := r.out.sync(); err != nil {
				return r.sum, err
			}
			r.watchNATS(prog)
		case <-tick.C:
			prog.update(r.snapshot(planning))
		}
	}
	prog.update(r.snapshot(false))
	if r.cfg.COCO {
		if err := r.out.sync(); err != nil {
			return r.sum, err
		}
		if err := r.exportCOCO(); err != nil {
			return r.sum, err
		}
	}
	return r.sum, nil
}

// writeFailures lists the set's failed jobs in the output directory's FailedFile, one JSON
// object a line, and names the first ones in the summary; with none it removes an earlier
// run's list, so the file always speaks of the latest run.
func (r *batchRun) writeFailures() error {
	path := filepath.Join(r.cfg.OutDir, FailedFile)
	r.sum.Failures = r.failures[:min(len(r.failures), MaxListedFailures)]
	if len(r.failures) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", path, err)
		}
		return nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, f := range r.failures {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	r.sum.FailedFile = path
	return nil
}

// publishDrain is how long an interrupted run waits for the publishes in flight.
const publishDrain = 5 * time.Second

// published records a job JetStream acknowledged (as a duplicate when p.dup).
func (r *batchRun) published(p published) error {
	if p.err != nil {
		return p.err
	}
	r.sum.Submitted++
	return r.out.markPublished(p.job, r.expected[p.job.ID].source, p.dup)
}

// drainPublishes waits, up to publishDrain, for the inFlight publishes to be acknowledged
// and records them. Those still unacknowledged then are not recorded; a rerun finds them
// in the state bucket or JetStream's duplicate window drops their second publish.
func (r *batchRun) drainPublishes(pubDone <-chan published, inFlight int) error {
	t := time.NewTimer(publishDrain)
	defer t.Stop()
	var errs []error
	for ; inFlight > 0; inFlight-- {
		select {
		case p := <-pubDone:
			if err := r.published(p); err != nil {
				errs = append(errs, err)
			}
		case <-t.C:
			return errors.Join(errs...)
		}
	}
	return errors.Join(errs...)
}

// pending counts the jobs of the set known so far that have no result yet: Succeeded and
// Failed count exactly the jobs of the set with a row.
func (r *batchRun) pending() int {
	return len(r.expected) - r.sum.Succeeded - r.sum.Failed
}

// admit takes a planned job into the set and reports whether it must be published.
func (r *batchRun) admit(ctx context.Context, p planned) (publish bool, err error) {
	id := p.job.ID
	if _, dup := r.expected[id]; dup {
		r.sum.Total-- // the same image and settings again: one job
		return false, nil
	}
	r.expected[id] = expectedJob{source: p.source, rel: p.rel, name: localName(p.stem, p.shared, id)}
	row, hadRow := r.prior.Done[id]
	if hadRow {
		if !replayedSince(row, p) {
			r.done[id] = true
			r.sum.AlreadyDone++
			r.finished(row)
			// A crash may have come between the row and its files.
			if err := ensureImageJSON(r.cfg.OutDir, row); err != nil {
				return false, err
			}
			r.ensureOverlay(ctx, row)
			return false, nil
		}
		r.replayed[id] = row.FinishedAt
	}
	if res, ok := r.early[id]; ok && r.acceptable(res) {
		delete(r.early, id)
		return false, r.deliver(ctx, res)
	}
	return !hadRow && !p.hasState && !r.prior.Published[id], nil
}

// replayedSince reports whether a job whose row did not succeed has been published again
// since that row was written (submit dlq replay): its state is queued or running again, or
// ended differently. A replay that failed again is not told apart from the first failure.
func replayedSince(row Row, p planned) bool {
	if row.Status == jobs.StatusSucceeded || !p.hasState {
		return false
	}
	return !p.state.Status.Terminal() || p.state.Status != row.Status
}

// acceptable reports whether res may be a job's row: any result, except for a replayed job
// only one that finished after the row it replaces.
func (r *batchRun) acceptable(res jobs.Result) bool {
	after, ok := r.replayed[res.ID]
	return !ok || res.FinishedAt.After(after)
}

// finished counts a row of the set, new or from an earlier run, and takes note of its
// failure and its warnings.
func (r *batchRun) finished(row Row) {
	for _, w := range row.Warnings {
		r.warn(w, 1)
	}
	if row.Status == jobs.StatusSucceeded {
		r.sum.Succeeded++
		return
	}
	r.sum.Failed++
	f := Failure{ID: row.ID, Source: row.Source, File: row.File, Status: row.Status}
	if row.Error != nil {
		f.Code, f.Message = row.Error.Code, row.Error.Message
	}
	r.failures = append(r.failures, f)
}

// warn records a warning once per text; jobs is how many jobs it adds (0 for one of the run).
func (r *batchRun) warn(text string, jobs int) {
	if i, ok := r.warnings[text]; ok {
		r.sum.Warnings[i].Jobs += jobs
		return
	}
	r.warnings[text] = len(r.sum.Warnings)
	r.sum.Warnings = append(r.sum.Warnings, Warning{Text: text, Jobs: jobs})
}

// receive handles one result from the stream.
func (r *batchRun) receive(ctx context.Context, res jobs.Result, planning bool) error {
	if r.done[res.ID] || !r.acceptable(res) {
		return nil // written before, a second delivery, or the result a replay replaces
	}
	if _, ok := r.expected[res.ID]; !ok {
		if row, had := r.prior.Done[res.ID]; planning && (!had || row.Status != jobs.StatusSucceeded) {
			r.early[res.ID] = res // its item may not be planned yet
		}
		return nil // a job of this batch that is not in this input set, or not yet planned
	}
	return r.deliver(ctx, res)
}

// deliver writes the row of a job of the set and fetches its overlay.
func (r *batchRun) deliver(ctx context.Context, res jobs.Result) error {
	r.done[res.ID] = true
	r.sum.Collected++
	if t := res.TimingMS; t.Total > 0 {
		r.sum.Latencies = append(r.sum.Latencies, time.Duration((t.QueueWait+t.Total)*float64(time.Millisecond)))
	}
	job := r.expected[res.ID]
	row := Row{Source: job.source, File: job.rel, Result: res}
	r.finished(row)
	localFiles(&row, job.name)
	if err := r.out.writeRow(row); err != nil {
		return err
	}
	if err := writeImageJSON(r.cfg.OutDir, row); err != nil {
		return err
	}
	r.ensureOverlay(ctx, row)
	return nil
}

// expectedJob is what a run knows of a job of its set before the result comes.
type expectedJob struct {
	source string // the path, URL or manifest line it was made from
	rel    string // the image's path below its input
	name   string // its files' path below results/ and overlays/, without extension
}

// ensureOverlay downloads the overlay of a row into the output directory when --overlay
// asked for it and it is not there yet. A failure is a warning: the row has the overlay's
// URL.
func (r *batchRun) ensureOverlay(ctx context.Context, row Row) {
	if !r.cfg.Defaults.Overlay || row.OverlayURL == nil || *row.OverlayURL == "" {
		return
	}
	path := overlayPath(r.cfg.OutDir, row)
	if _, err := os.Stat(path); err == nil {
		return
	}
	if err := r.downloadOverlay(ctx, path, *row.OverlayURL); err != nil {
		r.log.Warn("overlay not downloaded", "id", row.ID, "err", err)
	}
}

// overlayFormatOf is the encoding of a result's overlay: what the result says, else what
// its URL's extension says (PNG for workers that predate overlay_format, which wrote
// nothing else).
func overlayFormatOf(res jobs.Result) overlay.Format {
	if res.OverlayFormat.Valid() {
		return res.OverlayFormat
	}
	if res.OverlayURL != nil && strings.HasSuffix(*res.OverlayURL, overlay.JPEG.Ext()) {
		return overlay.JPEG
	}
	return overlay.PNG
}

// downloadOverlay copies the overlay at url to path, through a temporary file so that a
// crash never leaves half a picture under the final name.
func (r *batchRun) downloadOverlay(ctx context.Context, path, url string) error {
	if r.env.Store == nil {
		return fmt.Errorf("overlay %s: storage is not configured (LA_S3_* or LA_FILE_ROOTS)", url)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	data, err := r.env.Store.Get(ctx, url, maxOverlayBytes)
	if err != nil {
		return fmt.Errorf("overlay %s: %w", url, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("overlay %s: %w", url, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("overlay %s: %w", url, err)
	}
	return os.Rename(tmp, path)
}

// maxOverlayBytes bounds an overlay download; an overlay is a PNG or JPEG of the input
// image.
const maxOverlayBytes = 256 << 20

func (r *batchRun) snapshot(planning bool) progressSnapshot {
	s := progressSnapshot{
		Total: r.sum.Total, Done: r.sum.Succeeded + r.sum.Failed, Failed: r.sum.Failed,
		Published: r.sum.Submitted, Collected: r.sum.Collected,
		Elapsed: time.Since(r.start), Planning: planning,
	}
	if !r.lostAt.IsZero() {
		s.NATSLost = max(time.Since(r.lostAt), time.Second)
	}
	return s
}

// startPlanners plans every item on cfg.Concurrency goroutines and sends the jobs on the
// returned channel, which is closed when all are planned or ctx ends. A job that is neither
// finished nor recorded as published locally is looked up in the state bucket, so a job
// another run (or a crashed one) published is not published again; so is a job whose row
// says it failed, to learn whether it was replayed since.
func (r *batchRun) startPlanners(ctx context.Context, wg *sync.WaitGroup) <-chan planned {
	pl := &planner{defaults: r.cfg.Defaults, store: r.env.Store, uploadPrefix: r.cfg.UploadPrefix,
		maxBytes: r.cfg.MaxImageBytes, dryRun: r.cfg.dryRun}
	if r.out != nil {
		pl.record = r.out.recordFile
	}
	if !r.cfg.Rehash {
		pl.known = r.prior.Files
	}
	items := make(chan Item)
	out := make(chan planned)
	send := func(p planned) bool {
		select {
		case out <- p:
			return true
		case <-ctx.Done():
			return false
		}
	}
	wg.Go(func() {
		defer close(items)
		for _, it := range r.items {
			select {
			case items <- it:
			case <-ctx.Done():
				return
			}
		}
	})
	var workers sync.WaitGroup
	for range r.cfg.Concurrency {
		workers.Go(func() {
			for it := range items {
				job, err := pl.plan(ctx, it)
				if err != nil {
					send(planned{err: err})
					return
				}
				p := planned{job: job, source: it.Origin, rel: it.Rel, stem: it.stem, shared: it.shared}
				row, done := r.prior.Done[job.ID]
				if r.state != nil && ((!done && !r.prior.Published[job.ID]) || (done && row.Status != jobs.StatusSucceeded)) {
					p.state, p.hasState, err = r.state.Get(ctx, job.ID)
					if err != nil {
						send(planned{err: fmt.Errorf("%s: %w", it.Origin, err)})
						return
					}
				}
				if !send(p) {
					return
				}
			}
		})
	}
	wg.Go(func() { workers.Wait(); close(out) })
	return out
}

// startPublishers runs cfg.MaxInFlight publishers: at most that many jobs are published
// and not yet acknowledged at any time. They write no job state: a job's state entry is the
// workers' to write (the producer role may not; docs/worker.md, "Roles").
func (r *batchRun) startPublishers(ctx context.Context, wg *sync.WaitGroup, in <-chan *jobs.Job, done chan<- published) {
	pub := &publisher{js: r.env.JS, class: r.cfg.Class, backoff: r.cfg.Backoff,
		warn: func(id string, attempt int, wait time.Duration, err error) {
			if !r.natsLost.Load() { // while NATS is lost, the lost line says it once
				r.log.Warn("publish failed, retrying", "id", id, "attempt", attempt, "wait", wait, "err", err)
			}
		}}
	for range r.cfg.MaxInFlight {
		wg.Go(func() {
			for {
				var job *jobs.Job
				select {
				case job = <-in:
				case <-ctx.Done():
					return
				}
				dup, err := pub.publish(ctx, job)
				p := published{job: job, dup: dup, err: err}
				if ctx.Err() != nil && p.err != nil {
					return // interrupted: the loop is no longer listening
				}
				select {
				case done <- p:
				case <-ctx.Done():
					return
				}
			}
		})
	}
}
