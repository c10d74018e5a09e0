package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// maxPerPage bounds a gallery page.
const maxPerPage = 500

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	page := http.FileServerFS(Assets())
	mux.HandleFunc("GET "+Prefix+"{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, Assets(), "index.html")
	})
	mux.Handle("GET "+Prefix+"assets/", http.StripPrefix(Prefix+"assets/", page))
	mux.HandleFunc("GET "+apiPrefix+"overview", c.api(c.overview))
	mux.HandleFunc("GET "+apiPrefix+"batches", c.api(c.batches))
	mux.HandleFunc("GET "+apiPrefix+"batches/{batch}/results", c.api(c.results))
	mux.HandleFunc("GET "+apiPrefix+"jobs/{id}", c.api(c.job))
	mux.HandleFunc("GET "+apiPrefix+"failures", c.api(c.failures))
	mux.HandleFunc("GET "+apiPrefix+"pictures/{id}", c.pictures)
	mux.HandleFunc("GET "+apiPrefix+"session", c.getSession)
	mux.HandleFunc("POST "+apiPrefix+"session", c.postSession)
	mux.HandleFunc("POST "+apiPrefix+"replay", c.action(c.replay))
	mux.HandleFunc("POST "+apiPrefix+"cancel", c.action(c.cancel))
	mux.HandleFunc(apiPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such console API: %s %s", r.Method, r.URL.Path)
	})
	return c.secured(mux)
}

// secured adds the headers every console answer carries (the page loads nothing from
// elsewhere, may not be framed, and its API answers are never cached) and turns a panic
// into a logged stack and a 500 that says nothing of the code.
func (c *Console) secured(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		if strings.HasPrefix(r.URL.Path, apiPrefix) {
			h.Set("Cache-Control", "no-store")
		}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			c.log.Error("console handler panicked", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeError(w, http.StatusInternalServerError, "internal error")
		}()
		next.ServeHTTP(w, r)
	})
}

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

// api adapts a read handler: it answers 503 until Start, bounds the request's NATS and
// storage work, and writes the value or the error as JSON.
func (c *Console) api(h func(ctx context.Context, b *backend, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b := c.nats.Load()
		if b == nil {
			writeError(w, http.StatusServiceUnavailable, "starting: the console is not connected to NATS yet")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), c.opts.OpTimeout)
		defer cancel()
		v, err := h(ctx, b, r)
		if err != nil {
			c.writeErr(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// writeErr answers err: its own status for an apiError, 502 for a NATS or storage failure
// (logged; the answer says what failed, never a secret: errors carry URLs and names only).
func (c *Console) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeError(w, ae.status, "%s", ae.msg)
		return
	}
	c.log.Warn("console request failed", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusBadGateway, "%v", err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// overview is the queue, the rates, the workers and the errors.
func (c *Console) overview(ctx context.Context, b *backend, _ *http.Request) (any, error) {
	q, err := b.queue.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	workers, err := liveWorkers(ctx, b.js)
	if err != nil {
		return nil, err
	}
	succ, fail := c.idx.rates(time.Now())
	if q.classes == nil {
		q.classes = []classDepth{}
	}
	return map[string]any{
		"queue": q.classes, "in_flight": q.inFlight,
		"succeeded_per_min": succ, "failed_per_min": fail,
		"workers": workers, "errors": c.idx.errorCounts(),
	}, nil
}

// batches is every batch's progress.
func (c *Console) batches(ctx context.Context, b *backend, _ *http.Request) (any, error) {
	q, err := b.queue.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"batches": c.idx.batchList(q.batches), "pending_partial": q.partial}, nil
}

// results is one gallery page.
func (c *Console) results(_ context.Context, _ *backend, r *http.Request) (any, error) {
	batch := r.PathValue("batch")
	if !jobs.ValidToken(batch) {
		return nil, badRequest("batch %q must be 1-128 characters of [A-Za-z0-9_-]", batch)
	}
	q := r.URL.Query()
	f := filter{label: q.Get("label"), status: q.Get("status"), code: q.Get("code")}
	var err error
	if s := q.Get("min_score"); s != "" {
		if f.minScore, err = strconv.ParseFloat(s, 64); err != nil || f.minScore < 0 || f.minScore > 1 {
			return nil, badRequest("min_score %q: want a number from 0 to 1", s)
		}
	}
	if f.status != "" && !slices.Contains([]jobs.Status{jobs.StatusSucceeded, jobs.StatusFailed, jobs.StatusCanceled, jobs.StatusExpired}, jobs.Status(f.status)) {
		return nil, badRequest("status %q: want succeeded, failed, canceled or expired", f.status)
	}
	page, err := intParam(q.Get("page"), 1, 1, 1<<30, "page")
	if err != nil {
		return nil, err
	}
	perPage, err := intParam(q.Get("per_page"), 100, 1, maxPerPage, "per_page")
	if err != nil {
		return nil, err
	}
	out, ok := c.idx.gallery(batch, f, page, perPage)
	if !ok {
		return nil, notFound("batch %s has no results", batch)
	}
	return out, nil
}

func intParam(s string, def, lo, hi int, name string) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("%s %q: want a whole number from %d to %d", name, s, lo, hi)
	}
	return n, nil
}

// jobAnswer is what the console knows of one job.
type jobAnswer struct {
	ID      string `json:"id"`
	Batch   string `json:"batch,omitempty"`
	Overlay bool   `json:"overlay"` // pictures serves the stored overlay, boxes drawn in

	Result     json.RawMessage `json:"result"`
	Job        json.RawMessage `json:"job"`
	DeadLetter *jobs.DLQRecord `json:"dead_letter"`
	State      *jobs.State     `json:"state"`
	Queued     *queuedJob      `json:"queued"` // its message while still in LA_JOBS
	Attempts   int             `json:"attempts"`
	TimingMS   *jobs.JobTiming `json:"timing_ms"`
	Picture    string          `json:"picture"`
}

// job is one job's result (whole: read from storage when the message was a reference),
// dead-letter record, state, and its message while it is in LA_JOBS (then its state is
// queued when the workers have written none yet).
func (c *Console) job(ctx context.Context, b *backend, r *http.Request) (any, error) {
	id := r.PathValue("id")
	if !jobs.ValidResultID(id) {
		return nil, badRequest("job id %q must be 1-128 characters of [A-Za-z0-9_-], or seq=<n>", id)
	}
	a := jobAnswer{ID: id, Result: json.RawMessage("null"), Job: json.RawMessage("null"), Picture: apiPrefix + "pictures/" + id}
	raw, res, err := c.lastResult(ctx, b.js, id)
	if err != nil {
		return nil, err
	}
	if res != nil {
		a.Result, a.Attempts, a.TimingMS = raw, res.Attempt, &res.TimingMS
		a.Batch, a.Overlay = res.Batch, res.OverlayURL != nil
	}
	rec, err := lastDeadLetter(ctx, b.js, id)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		a.DeadLetter = rec
		if a.Batch == "" {
			a.Batch = rec.Batch
		}
		a.Attempts = max(a.Attempts, rec.Attempts)
		if len(rec.Job) > 0 {
			a.Job = rec.Job
		}
		rec.JobBase64 = nil // bytes that are not JSON: the record says where they came from
	}
	if jobs.ValidToken(id) {
		st, ok, err := b.state.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			a.State = &st
			a.Attempts = max(a.Attempts, st.Attempt)
		}
	}
	q, unread, err := b.queued.lookup(ctx, b.js, id)
	if err != nil {
		if res == nil && rec == nil && a.State == nil {
			return nil, err // nothing else to show
		}
		// The job is known without its queue message: show what is known.
		c.log.Debug("console: job lookup in the queue failed", "job", id, "err", err)
		q, unread = nil, 0
	}
	if q != nil {
		a.Queued = q
		if a.Batch == "" {
			a.Batch = q.batch
		}
		if q.data != nil {
			a.Job = q.data
		}
		if a.State == nil { // published, not yet picked up: the workers write no state till then
			a.State = &jobs.State{Status: jobs.StatusQueued, UpdatedAt: q.PublishedAt}
		}
	}
	if res == nil && rec == nil && a.State == nil {
		if unread > 0 {
			return nil, notFound("job %s is unknown: no result, no dead-letter record, no state, and not among the queued jobs read so far (%d messages of %s not read yet: ask again)", id, unread, jobs.JobsStream)
		}
		return nil, notFound("job %s is unknown: no result, no dead-letter record, no state, not queued (never published, or expired)", id)
	}
	return a, nil
}

// lastResult is job id's latest result message, the whole stored result in place of a
// reference when storage has it.
func (c *Console) lastResult(ctx context.Context, js jetstream.JetStream, id string) (json.RawMessage, *jobs.Result, error) {
	st, err := js.Stream(ctx, jobs.ResultsStream)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", jobs.ResultsStream, err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, jobs.ResultSubjectPrefix+"*."+id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("result of job %s: %w", id, err)
	}
	var res jobs.Result
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		return nil, nil, fmt.Errorf("result of job %s on %s is not valid JSON: %w", id, msg.Subject, err)
	}
	raw := json.RawMessage(msg.Data)
	if res.Truncated && c.opts.Store != nil && res.ResultURL != "" {
		sctx, cancel := context.WithTimeout(ctx, c.opts.OpTimeout)
		defer cancel()
		if b, err := c.opts.Store.Get(sctx, res.ResultURL, maxResultBytes); err == nil && json.Valid(b) {
			raw = b
		}
	}
	return raw, &res, nil
}

// lastDeadLetter is job id's latest dead-letter record, nil when it has none.
func lastDeadLetter(ctx context.Context, js jetstream.JetStream, id string) (*jobs.DLQRecord, error) {
	st, err := js.Stream(ctx, jobs.DLQStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", jobs.DLQStream, err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, jobs.DLQSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dead-letter record of job %s: %w", id, err)
	}
	var rec jobs.DLQRecord
	if err := json.Unmarshal(msg.Data, &rec); err != nil {
		return nil, fmt.Errorf("dead-letter record of job %s is not valid JSON: %w", id, err)
	}
	return &rec, nil
}

type failureGroup struct {
	Code  string `json:"code"`
	Batch string `json:"batch"`
	Count int    `json:"count"`
}

type failureItem struct {
	ID       string    `json:"id"`
	Batch    string    `json:"batch"`
	Code     string    `json:"code"`
	Message  string    `json:"message"`
	At       time.Time `json:"at"`
	Attempts int       `json:"attempts"`
	Worker   string    `json:"worker"`
}

// failures is the dead-letter queue grouped by code and batch, and its records (the
// latest per job, newest first), filtered by batch and code.
func (c *Console) failures(ctx context.Context, b *backend, r *http.Request) (any, error) {
	batch, code := r.URL.Query().Get("batch"), r.URL.Query().Get("code")
	entries, err := b.dlq.list(ctx)
	if err != nil {
		return nil, err
	}
	groups := map[[2]string]int{}
	items := []failureItem{}
	for _, e := range slices.Backward(entries) {
		rec := e.record
		if (batch != "" && rec.Batch != batch) || (code != "" && rec.Code != code) {
			continue
		}
		groups[[2]string{rec.Code, rec.Batch}]++
		items = append(items, failureItem{ID: rec.ID, Batch: rec.Batch, Code: rec.Code, Message: rec.Reason,
			At: rec.FailedAt.UTC(), Attempts: rec.Attempts, Worker: rec.Worker})
	}
	out := make([]failureGroup, 0, len(groups))
	for k, n := range groups {
		out = append(out, failureGroup{Code: k[0], Batch: k[1], Count: n})
	}
	slices.SortFunc(out, func(a, b failureGroup) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return cmp.Or(strings.Compare(a.Code, b.Code), strings.Compare(a.Batch, b.Batch))
	})
	return map[string]any{"groups": out, "items": items}, nil
}
