package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/storage"
)

// DLQRecord is the body of a message on la.dlq.<id> in LA_DLQ.
type DLQRecord struct {
	ID        string          `json:"id"`
	Code      string          `json:"code"`
	Reason    string          `json:"reason"`
	Attempts  int             `json:"attempts"`
	Worker    string          `json:"worker"`
	Subject   string          `json:"subject"`    // the subject the job was published to
	StreamSeq uint64          `json:"stream_seq"` // its sequence in LA_JOBS
	FailedAt  time.Time       `json:"failed_at"`
	Job       json.RawMessage `json:"job,omitempty"`        // the original bytes, when they are JSON
	JobBase64 []byte          `json:"job_base64,omitempty"` // the original bytes otherwise
}

// DLQSubject is the subject of job id's dead-letter record.
func DLQSubject(id string) string { return DLQSubjectPrefix + id }

// ResultURL is where the result JSON of job id is stored under output prefix.
func ResultURL(output, id string) string { return joinURL(output, id+".json") }

// OverlayURL is where the overlay PNG of job id is stored under output prefix.
func OverlayURL(output, id string) string { return joinURL(output, id+".png") }

func joinURL(prefix, name string) string {
	if strings.HasSuffix(prefix, "/") {
		return prefix + name
	}
	return prefix + "/" + name
}

// sink stores and publishes terminal results and dead-letter records. It is shared by the
// Runner and the max-deliveries watcher, so both end a job the same way.
type sink struct {
	topo          *Topology
	store         storage.Store
	worker        string
	defaultOutput string
	opTimeout     time.Duration
	log           *slog.Logger
	metrics       *Metrics
}

// original is what a dead-letter record keeps of the job message.
type original struct {
	data      []byte
	subject   string
	streamSeq uint64
}

// transientError marks an error that a later attempt may not meet (storage or NATS down).
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

func transient(err error) error { return &transientError{err: err} }

func isTransient(err error) bool {
	var te *transientError
	return errors.As(err, &te)
}

// output is the result prefix of job (the worker default when the job names none).
func (s *sink) output(job *Job) string {
	if job != nil && job.Output != "" {
		return job.Output
	}
	return s.defaultOutput
}

// putOverlay stores the overlay PNG and returns its URL.
func (s *sink) putOverlay(ctx context.Context, job *Job, png []byte) (string, error) {
	url := OverlayURL(s.output(job), job.ID)
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := s.store.Put(ctx, url, png, "image/png"); err != nil {
		return "", classifyStoreWrite(fmt.Errorf("store overlay %s: %w", url, err))
	}
	return url, nil
}

// finish stores res at <output>/<id>.json, publishes it on la.results.<batch>.<id>, writes
// a dead-letter record when deadLetter is set, and records the terminal state. A transient
// error means nothing is lost by trying again later: every step is keyed by the job id and
// the job message's stream sequence (orig), so a redelivery of the same message repeats
// nothing, while a job published again (a replay) gets fresh result and DLQ messages.
// When the output location itself is refused (bad URL, not allowed), the result cannot be
// stored: it becomes a failed result that is still published and dead-lettered.
func (s *sink) finish(ctx context.Context, job *Job, res *Result, orig *original, deadLetter bool) error {
	res.Worker = s.worker
	res.FinishedAt = time.Now().UTC()
	url := ResultURL(s.output(job), res.ID)
	body, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result of job %s: %w", res.ID, err)
	}
	if err := s.put(ctx, url, body); err != nil {
		if isTransient(err) {
			return err
		}
		// The output prefix is unusable: report that instead, without storing.
		res.Answer = emptyAnswer(res.Query)
		res.Status = StatusFailed
		res.Error = &ErrorInfo{Code: CodeBadURL, Message: "field output: " + err.Error()}
		res.OverlayURL = nil
		if body, err = json.Marshal(res); err != nil {
			return fmt.Errorf("encode result of job %s: %w", res.ID, err)
		}
		deadLetter = true
	}
	msgID := fmt.Sprintf("%s-%d", res.ID, orig.streamSeq)
	if err := s.publish(ctx, ResultSubject(res.Batch, res.ID), body, msgID); err != nil {
		return err
	}
	if deadLetter {
		if err := s.deadLetter(ctx, res, orig, msgID); err != nil {
			return err
		}
	}
	st := State{Status: res.Status, Attempt: res.Attempt, Worker: s.worker}
	if res.Error != nil {
		st.Error = res.Error.Code
	}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := s.topo.State.Put(octx, res.ID, st); err != nil {
		return transient(err)
	}
	return nil
}

func (s *sink) put(ctx context.Context, url string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := s.store.Put(ctx, url, body, "application/json"); err != nil {
		return classifyStoreWrite(fmt.Errorf("store result %s: %w", url, err))
	}
	return nil
}

func (s *sink) publish(ctx context.Context, subject string, body []byte, msgID string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if _, err := s.topo.JS.Publish(ctx, subject, body, jetstream.WithMsgID(msgID)); err != nil {
		return transient(fmt.Errorf("publish %s: %w", subject, err))
	}
	return nil
}

func (s *sink) deadLetter(ctx context.Context, res *Result, orig *original, msgID string) error {
	rec := DLQRecord{
		ID:        res.ID,
		Attempts:  res.Attempt,
		Worker:    s.worker,
		Subject:   orig.subject,
		StreamSeq: orig.streamSeq,
		FailedAt:  res.FinishedAt,
	}
	if res.Error != nil {
		rec.Code, rec.Reason = res.Error.Code, res.Error.Message
	}
	if json.Valid(orig.data) {
		rec.Job = orig.data
	} else {
		rec.JobBase64 = orig.data
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode dead-letter record of job %s: %w", res.ID, err)
	}
	if err := s.publish(ctx, DLQSubject(res.ID), body, msgID); err != nil {
		return err
	}
	s.metrics.deadLettered()
	return nil
}

// classifyStoreWrite makes a write that can never succeed (a bad or refused location, a
// bucket that does not exist, access denied, a file where a folder is needed) a permanent
// bad_url failure, and everything else (server down, timeouts, SlowDown) transient.
func classifyStoreWrite(err error) error {
	if storage.Permanent(err) {
		return &jobError{code: CodeBadURL, err: err}
	}
	return transient(err)
}
