package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// Admin answers status, cancel and dead-letter questions against a running system.
type Admin struct {
	js    jetstream.JetStream
	state *jobs.StateStore
	store storage.Store // nil when no storage is configured
}

// NewAdmin opens the state bucket; the streams are opened as needed. store, which may be
// nil, reads what a worker stored instead of publishing it: the whole result behind a
// reference (status), a dead-lettered job's bytes (replay).
func NewAdmin(ctx context.Context, js jetstream.JetStream, store storage.Store) (*Admin, error) {
	kv, err := js.KeyValue(ctx, jobs.StateBucket)
	if err != nil {
		return nil, fmt.Errorf("state bucket %s: %w (start a worker once: it creates the bucket)", jobs.StateBucket, err)
	}
	return &Admin{js: js, state: jobs.NewStateStore(kv), store: store}, nil
}

// JobStatus is what the system knows about one job.
type JobStatus struct {
	ID string `json:"id"`
	// Status is the state bucket's status, else the latest result's ("unknown" without
	// either).
	Status          string       `json:"status"`
	State           *jobs.State  `json:"state"` // nil when the state bucket has no entry
	CancelRequested bool         `json:"cancel_requested"`
	Result          *jobs.Result `json:"result"` // the latest result on LA_RESULTS, if any
}

// Status looks job id up in the state bucket and LA_RESULTS.
func (a *Admin) Status(ctx context.Context, id string) (JobStatus, error) {
	if !jobs.ValidResultID(id) {
		return JobStatus{}, &ArgumentError{Err: fmt.Errorf("job id %q must be 1-128 characters of [A-Za-z0-9_-], or seq=<n>", id)}
	}
	s := JobStatus{ID: id, Status: "unknown"}
	state, hasState, err := a.state.Get(ctx, id)
	if err != nil {
		return s, err
	}
	if hasState {
		s.State, s.Status = &state, string(state.Status)
	}
	if s.CancelRequested, err = a.state.CancelRequested(ctx, id); err != nil {
		return s, err
	}
	results, err := a.js.Stream(ctx, jobs.ResultsStream)
	if err != nil {
		return s, fmt.Errorf("stream %s: %w", jobs.ResultsStream, err)
	}
	msg, err := results.GetLastMsgForSubject(ctx, jobs.ResultSubjectPrefix+"*."+id)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return s, fmt.Errorf("result of job %s: %w", id, err)
	default:
		var res jobs.Result
		if err := json.Unmarshal(msg.Data, &res); err != nil {
			return s, fmt.Errorf("result of job %s on %s is not valid JSON: %w", id, msg.Subject, err)
		}
		if res.Truncated && a.store != nil {
			// Best effort, once: the reference says enough for a status line.
			full, err := fullResult(ctx, a.store, res, func(error) bool { return false })
			if err == nil {
				res = full
			}
		}
		s.Result = &res
		if s.State == nil {
			s.Status = string(res.Status)
		}
	}
	if s.State == nil && s.Result == nil {
		return s, fmt.Errorf("job %s: %w (no state and no result: it was never published, or its records expired)", id, ErrUnknownJob)
	}
	return s, nil
}

// Print prints the status for people.
func (s JobStatus) Print(w io.Writer) {
	fmt.Fprintf(w, "job %s: %s", s.ID, s.Status)
	if s.State != nil && s.State.Attempt > 0 {
		fmt.Fprintf(w, " (attempt %d", s.State.Attempt)
		if s.State.Worker != "" {
			fmt.Fprintf(w, " on %s", s.State.Worker)
		}
		fmt.Fprint(w, ")")
	}
	if s.State != nil && !s.State.UpdatedAt.IsZero() {
		fmt.Fprintf(w, ", updated %s", s.State.UpdatedAt.Format("2006-01-02 15:04:05Z07:00"))
	}
	fmt.Fprintln(w)
	if s.CancelRequested {
		fmt.Fprintln(w, "  cancel requested")
	}
	if r := s.Result; r != nil {
		fmt.Fprintf(w, "  result: %s, batch %s, image %s\n", r.Status, r.Batch, r.Image)
		if r.Error != nil {
			fmt.Fprintf(w, "  error: %s: %s\n", r.Error.Code, r.Error.Message)
		} else {
			fmt.Fprintf(w, "  %d detections, %d points, %d tokens, %.0f ms\n", len(r.Detections), len(r.Points), r.NumGeneratedTokens, r.TimingMS.Total)
		}
		if r.OverlayURL != nil {
			fmt.Fprintf(w, "  overlay: %s\n", *r.OverlayURL)
		}
	}
}

// BatchStatus counts a batch's jobs: those still in LA_JOBS (queued or running) and the
// results on LA_RESULTS by status.
type BatchStatus struct {
	Batch    string              `json:"batch"`
	InQueue  int                 `json:"in_queue"`
	Finished int                 `json:"finished"` // distinct jobs with a result
	Results  map[jobs.Status]int `json:"results"`  // their latest results by status
	// First and Last are the times of the oldest and newest job message or result seen
	// (in `submit batches`).
	First time.Time `json:"first_seen,omitzero"`
	Last  time.Time `json:"last_seen,omitzero"`
}

// BatchStatus scans LA_JOBS and LA_RESULTS for batch.
func (a *Admin) BatchStatus(ctx context.Context, batch string) (BatchStatus, error) {
	if !jobs.ValidToken(batch) {
		return BatchStatus{}, &ArgumentError{Err: fmt.Errorf("batch %q must be 1-128 characters of [A-Za-z0-9_-]", batch)}
	}
	b := BatchStatus{Batch: batch, Results: map[jobs.Status]int{}}
	err := jobs.QueuedJobs(ctx, a.js, func(j *jobs.Job, _ time.Time) error {
		if j.Batch == batch {
			b.InQueue++
		}
		return nil
	})
	if err != nil {
		return b, err
	}
	latest := map[string]jobs.Status{}
	err = jobs.ReadStream(ctx, a.js, jobs.ResultsStream, jobs.ResultSubjectPrefix+batch+".>", func(m jetstream.Msg) error {
		var r jobs.Result
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			return nil // not a result: nothing to count
		}
		latest[r.ID] = r.Status
		return nil
	})
	if err != nil {
		return b, err
	}
	for _, st := range latest {
		b.Results[st]++
	}
	b.Finished = len(latest)
	return b, nil
}

// Print prints the counts for people.
func (b BatchStatus) Print(w io.Writer) {
	fmt.Fprintf(w, "batch %s: %d in the queue (queued or running), %d finished", b.Batch, b.InQueue, b.Finished)
	var parts []string
	for _, st := range []jobs.Status{jobs.StatusSucceeded, jobs.StatusFailed, jobs.StatusCanceled, jobs.StatusExpired} {
		if n := b.Results[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
}

// Cancel requests the cancel of job id. A queued job ends canceled when a worker picks it
// up; a running one stops at its next decode step.
func (a *Admin) Cancel(ctx context.Context, id, reason string) error {
	return a.state.RequestCancel(ctx, id, reason)
}

// CancelBatch requests the cancel of every job of batch still in LA_JOBS and returns how
// many were asked.
func (a *Admin) CancelBatch(ctx context.Context, batch, reason string) (int, error) {
	if !jobs.ValidToken(batch) {
		return 0, &ArgumentError{Err: fmt.Errorf("batch %q must be 1-128 characters of [A-Za-z0-9_-]", batch)}
	}
	n := 0
	err := jobs.QueuedJobs(ctx, a.js, func(j *jobs.Job, _ time.Time) error {
		if j.Batch != batch {
			return nil
		}
		if err := a.state.RequestCancel(ctx, j.ID, reason); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}

// DLQEntry is one record in LA_DLQ with its stream sequence and its job's batch.
type DLQEntry struct {
	Seq    uint64         `json:"seq"`
	Batch  string         `json:"batch"` // "" when the record does not carry the job (job_url)
	Record jobs.DLQRecord `json:"record"`
}

// DLQList returns every dead-letter record, oldest first.
func (a *Admin) DLQList(ctx context.Context) ([]DLQEntry, error) {
	var out []DLQEntry
	err := jobs.ReadStream(ctx, a.js, jobs.DLQStream, jobs.DLQSubjectPrefix+">", func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", jobs.DLQStream, err)
		}
		e := DLQEntry{Seq: md.Sequence.Stream}
		if err := json.Unmarshal(m.Data(), &e.Record); err != nil {
			e.Record.ID = strings.TrimPrefix(m.Subject(), jobs.DLQSubjectPrefix)
			e.Record.Reason = "unreadable record: " + err.Error()
		}
		e.Batch = dlqBatch(e.Record)
		out = append(out, e)
		return nil
	})
	return out, err
}

// PrintDLQ prints a table of records.
func PrintDLQ(w io.Writer, entries []DLQEntry) {
	if len(entries) == 0 {
		fmt.Fprintln(w, "no dead-lettered jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBATCH\tCODE\tATTEMPTS\tFAILED AT\tREASON")
	for _, e := range entries {
		r := e.Record
		reason := r.Reason
		if len(reason) > 100 {
			reason = reason[:97] + "..."
		}
		batch := e.Batch
		if batch == "" {
			batch = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, batch, r.Code, r.Attempts, r.FailedAt.Format("2006-01-02 15:04:05Z07:00"), reason)
	}
	tw.Flush()
}

// DLQShow returns the latest dead-letter record of job id.
func (a *Admin) DLQShow(ctx context.Context, id string) (DLQEntry, error) {
	if !jobs.ValidResultID(id) {
		return DLQEntry{}, &ArgumentError{Err: fmt.Errorf("job id %q must be 1-128 characters of [A-Za-z0-9_-], or seq=<n>", id)}
	}
	st, err := a.js.Stream(ctx, jobs.DLQStream)
	if err != nil {
		return DLQEntry{}, fmt.Errorf("stream %s: %w", jobs.DLQStream, err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, jobs.DLQSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DLQEntry{}, fmt.Errorf("job %s is not in the dead-letter queue: %w", id, ErrUnknownJob)
	}
	if err != nil {
		return DLQEntry{}, fmt.Errorf("dead-letter record of job %s: %w", id, err)
	}
	e := DLQEntry{Seq: msg.Sequence}
	if err := json.Unmarshal(msg.Data, &e.Record); err != nil {
		return e, fmt.Errorf("dead-letter record of job %s is not valid JSON: %w", id, err)
	}
	return e, nil
}

// DLQReplay publishes the dead-lettered job id again, after its cause is fixed
// (jobs.Replay: the state back to queued, the cancel request and the claim cleared, the
// original bytes published under a fresh Nats-Msg-Id, the dead-letter records removed). A
// `submit run` over the same inputs then waits for the job's new result instead of
// reporting the old failure.
func (a *Admin) DLQReplay(ctx context.Context, id string) error {
	e, err := a.DLQShow(ctx, id)
	if err != nil {
		return err
	}
	return jobs.Replay(ctx, a.js, a.state, a.store, e.Seq, e.Record)
}

// DLQReplayAll replays every dead-lettered job and returns the ids replayed, leaving out
// those whose latest record is a duplicate_id (DLQReplay refuses them). It stops at the
// first failure.
func (a *Admin) DLQReplayAll(ctx context.Context) ([]string, error) {
	entries, err := a.DLQList(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	lost := map[string]bool{} // the latest record is a duplicate_id loser's: not replayable
	var order []string        // oldest record first, each job once
	for _, e := range entries {
		if !seen[e.Record.ID] {
			seen[e.Record.ID] = true
			order = append(order, e.Record.ID)
		}
		lost[e.Record.ID] = e.Record.Code == jobs.CodeDuplicateID
	}
	var done []string
	for _, id := range order {
		if lost[id] {
			continue
		}
		if err := a.DLQReplay(ctx, id); err != nil {
			return done, err
		}
		done = append(done, id)
	}
	return done, nil
}
