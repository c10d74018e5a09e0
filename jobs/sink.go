package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/rawjson"
	"github.com/locateanything/detect/storage"
)

// DLQRecord is the body of a message on la.dlq.<id> in LA_DLQ.
type DLQRecord struct {
	ID string `json:"id"`
	// Batch is the job's batch, as its result names it ("default" when the job named none
	// or could not be read), so that records can be sorted by batch even when the job's
	// bytes are stored elsewhere (JobURL) or are not JSON.
	Batch     string          `json:"batch,omitempty"`
	Code      string          `json:"code"`
	Reason    string          `json:"reason"`
	Attempts  int             `json:"attempts"`
	Worker    string          `json:"worker"`
	Subject   string          `json:"subject"`    // the subject the job was published to
	StreamSeq uint64          `json:"stream_seq"` // its sequence in LA_JOBS
	FailedAt  time.Time       `json:"failed_at"`
	Job       json.RawMessage `json:"job,omitempty"`        // the original bytes, when they are JSON
	JobBase64 []byte          `json:"job_base64,omitempty"` // the original bytes otherwise
	// JobURL is where the original bytes are stored when the record would be too large for
	// a NATS message with them (Job and JobBase64 are then empty).
	JobURL string `json:"job_url,omitempty"`
}

// DLQSubject is the subject of job id's dead-letter record.
func DLQSubject(id string) string { return DLQSubjectPrefix + id }

// ResultURL is where the result JSON of job id is stored under output prefix.
func ResultURL(output, id string) string { return joinURL(output, id+".json") }

// ThumbSuffix ends the name of a job's thumbnail, <output>/<id>.thumb.jpg beside its
// overlay (or its result when it has none): the web console makes it on demand and keeps
// it there (docs/console.md); no worker writes it.
const ThumbSuffix = ".thumb.jpg"

// JobURL is where the original message of job id is stored under output prefix when its
// dead-letter record cannot carry it.
func JobURL(output, id string) string { return joinURL(output, id+".job.json") }

// OverlayURL is where the overlay of job id, encoded as f, is stored under output prefix:
// <id>.png or <id>.jpg.
func OverlayURL(output, id string, f overlay.Format) string { return joinURL(output, id+f.Ext()) }

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
	tracer        trace.Tracer // nil: no spans
	healer        *Healer      // told when a publish fails (a stream may be gone); nil: none
	// lastWord is set for the max-deliveries watcher: no delivery follows its write, so
	// the default output refusing access is final there (classifyWrite), not a retry.
	lastWord bool
}

// span starts a child span of the job's span in ctx.
func (s *sink) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return orNoop(s.tracer).Start(ctx, name, trace.WithAttributes(attrs...))
}

// original is what a dead-letter record keeps of the job message.
type original struct {
	data      []byte
	subject   string
	streamSeq uint64
	spill     string // the name its bytes are stored under (<spill>.job.json) when a record cannot carry them; "" = the job id
}

// output is the result prefix of job (the worker default when the job names none). An
// output that could squat another job's result (checkOutput) is never used, even by a job
// that failed before its output was checked.
func (s *sink) output(job *Job) string {
	if job != nil && job.Output != "" && squattingName(job.Output) == "" {
		return job.Output
	}
	return s.defaultOutput
}

// putOverlay stores the overlay picture, encoded as f, and returns its URL.
func (s *sink) putOverlay(ctx context.Context, job *Job, f overlay.Format, pic []byte) (string, error) {
	output := s.output(job)
	url := OverlayURL(output, job.ID, f)
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := s.store.Put(ctx, url, pic, f.ContentType()); err != nil {
		return "", s.classifyWrite(output, fmt.Errorf("store overlay %s: %w", url, err))
	}
	return url, nil
}

// finish stores res at <output>/<id>.json, publishes it on la.results.<batch>.<id>, writes
// a dead-letter record when deadLetter is set, and records the terminal state. A transient
// error means nothing is lost by trying again later: every step is keyed by the job id and
// the job message's stream sequence (orig), so a redelivery of the same message repeats
// nothing, while a job published again (a replay) gets fresh result and DLQ messages.
// When the job's output location refuses for good (bad URL, not allowed, no such bucket),
// the result becomes the bad_url failure that says so (storeResult), stored under the
// worker's default output instead, published and dead-lettered.
// A result or record too large for one NATS message is published without its bulky parts,
// naming where they are stored (Result.reference, DLQRecord.JobURL).
func (s *sink) finish(ctx context.Context, job *Job, res *Result, orig *original, deadLetter bool) error {
	res.Worker = s.worker
	res.FinishedAt = time.Now().UTC()
	uctx, upload := s.span(ctx, SpanUpload, attribute.String("la.object", "result"))
	output, refused, err := s.storeResult(uctx, job, res)
	endSpan(upload, err)
	if err != nil {
		return err
	}
	deadLetter = deadLetter || refused
	body, err := s.resultMessage(res)
	if err != nil {
		return err
	}
	msgID := fmt.Sprintf("%s-%d", res.ID, orig.streamSeq)
	pctx, publish := s.span(ctx, SpanPublish, attribute.Bool("la.dead_letter", deadLetter))
	err = s.publish(pctx, ResultSubject(res.Batch, res.ID), body, msgID)
	if err == nil && deadLetter {
		err = s.deadLetter(pctx, res, orig, msgID, output)
	}
	endSpan(publish, err)
	if err != nil {
		return err
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

// storeResult stores res at <output>/<id>.json and sets its ResultURL; output is the prefix
// it went under ("" when none took it). When the job's own output refuses it for good, res
// becomes the bad_url failure that says so (refused), keeping what it said before in the
// message, and is stored under the worker's default output instead; when that refuses too,
// nowhere (a worker whose default output refuses is misconfigured: the result is still
// published). A transient failure is returned: nothing is lost by trying again.
func (s *sink) storeResult(ctx context.Context, job *Job, res *Result) (output string, refused bool, err error) {
	output = s.output(job)
	err = s.putResult(ctx, output, res)
	if !refusedForGood(err) {
		return output, false, err
	}
	// The output prefix is unusable: report that instead, blaming the job's field only
	// when the job set it.
	msg := "result location (the worker's default output, LA_RESULTS_URL): " + err.Error()
	if output != s.defaultOutput {
		msg = "field output: " + err.Error()
	}
	s.removeOrphanOverlay(ctx, res)
	if res.Error != nil {
		msg += fmt.Sprintf(" (the job had failed before that: %s: %s)", res.Error.Code, res.Error.Message)
	}
	res.Answer = emptyAnswer(res.Query)
	res.Status = StatusFailed
	res.Error = &ErrorInfo{Code: CodeBadURL, Message: msg}
	res.OverlayURL, res.OverlayFormat = nil, ""
	if output != s.defaultOutput {
		output = s.defaultOutput
		if err = s.putResult(ctx, output, res); !refusedForGood(err) {
			return output, true, err
		}
	}
	s.log.Error("result not stored: the worker's default output refuses it", "id", res.ID, "err", err)
	res.ResultURL = ""
	return "", true, nil
}

// refusedForGood reports whether err is a store write no retry can make succeed.
func refusedForGood(err error) bool {
	var je *jobError
	return errors.As(err, &je)
}

// putResult stores res at <output>/<id>.json, which becomes its ResultURL.
func (s *sink) putResult(ctx context.Context, output string, res *Result) error {
	res.ResultURL = ResultURL(output, res.ID)
	body, err := rawjson.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result of job %s: %w", res.ID, err)
	}
	return s.put(ctx, "result", output, res.ResultURL, body, "application/json")
}

// payloadHeadroom is what a message body leaves of the connection's max payload for the
// message's headers (Nats-Msg-Id).
const payloadHeadroom = 4 << 10

// maxBody is the largest result or dead-letter record published whole: the max payload the
// server announced (1 MiB by default) less payloadHeadroom.
func (s *sink) maxBody() int {
	limit := s.topo.JS.Conn().MaxPayload()
	if limit <= 0 {
		limit = 1 << 20 // not announced yet: the server's default
	}
	return int(limit) - payloadHeadroom
}

// resultMessage is res as published: whole when it fits in a message, else its reference.
func (s *sink) resultMessage(res *Result) ([]byte, error) {
	body, err := rawjson.Marshal(res)
	if err != nil || len(body) <= s.maxBody() {
		return body, err
	}
	ref := res.reference()
	if ref.ResultURL == "" {
		s.log.Error("result too large to publish and not stored: published without metadata and the answer's lists",
			"id", res.ID, "bytes", len(body))
	}
	if body, err = rawjson.Marshal(ref); err != nil || len(body) <= s.maxBody() {
		return body, err
	}
	// Only a huge image URL or error message gets here; the stored result keeps them.
	ref.Image = ""
	if ref.Error != nil {
		ref.Error = &ErrorInfo{Code: ref.Error.Code, Message: cut(ref.Error.Message, 1024)}
	}
	return rawjson.Marshal(ref)
}

// reference is r as published when it is too large for one NATS message: the bulky parts
// (metadata, raw_text, detections, points) left out and Truncated set; ResultURL names the
// whole result.
func (r Result) reference() Result {
	r.Metadata = nil
	r.RawText = ""
	r.Detections = []engine.Detection{}
	r.Points = []engine.Point{}
	r.Truncated = true
	return r
}

// cut is s in at most n bytes, on a rune boundary, marked when shortened.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + " [...]"
}

// put stores body at url, below the output prefix output; what names it in the error
// ("result", "job").
func (s *sink) put(ctx context.Context, what, output, url string, body []byte, contentType string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := s.store.Put(ctx, url, body, contentType); err != nil {
		return s.classifyWrite(output, fmt.Errorf("store %s %s: %w", what, url, err))
	}
	return nil
}

func (s *sink) publish(ctx context.Context, subject string, body []byte, msgID string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	injectTrace(ctx, msg.Header) // a consumer of the message can continue the job's trace
	if _, err := s.topo.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID)); err != nil {
		s.healer.Nudge()
		return transient(fmt.Errorf("publish %s: %w", subject, err))
	}
	return nil
}

// deadLetter publishes the record of a job that failed for good. When the record would be
// too large for a message with the job's bytes in it, the bytes are stored at
// <output>/<id>.job.json (output: where the result went, else the worker's default) and
// the record names them instead.
func (s *sink) deadLetter(ctx context.Context, res *Result, orig *original, msgID, output string) error {
	rec := DLQRecord{
		ID:        res.ID,
		Batch:     res.Batch,
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
	body, err := rawjson.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode dead-letter record of job %s: %w", res.ID, err)
	}
	if len(body) > s.maxBody() {
		rec.Job, rec.JobBase64 = nil, nil
		if rec.JobURL, err = s.putJob(ctx, cmp.Or(orig.spill, res.ID), orig.data, output); err != nil {
			return err
		}
		rec.Reason = cut(rec.Reason, 4096)
		if body, err = rawjson.Marshal(rec); err != nil {
			return fmt.Errorf("encode dead-letter record of job %s: %w", res.ID, err)
		}
	}
	if err := s.publish(ctx, DLQSubject(res.ID), body, msgID); err != nil {
		return err
	}
	s.metrics.deadLettered()
	return nil
}

// putJob stores the bytes of a job message for its dead-letter record under output, or the
// worker's default output when output is empty or refuses them, and returns their URL; ""
// when both refuse (the record then holds no job), an error when storage failed for now.
func (s *sink) putJob(ctx context.Context, id string, data []byte, output string) (string, error) {
	contentType := "application/octet-stream"
	if json.Valid(data) {
		contentType = "application/json"
	}
	var err error
	for _, prefix := range []string{output, s.defaultOutput} {
		if prefix == "" {
			continue
		}
		url := JobURL(prefix, id)
		if err = s.put(ctx, "job", prefix, url, data, contentType); err == nil {
			return url, nil
		}
		if isTransient(err) {
			return "", err
		}
	}
	s.log.Error("dead-letter record without its job: too large to carry, and no output takes it", "id", id, "err", err)
	return "", nil
}

// classifyWrite classifies a failed write below the output prefix output. The worker's
// default output refusing access (EACCES, EPERM, a read-only file system, S3's
// AccessDenied) is the worker's trouble, not the job's: transient, so the job waits for
// it to be fixed instead of failing for good (but on the max-deliveries watcher's last
// word, where nothing follows). Everything else is classifyStoreWrite.
func (s *sink) classifyWrite(output string, err error) error {
	if output == s.defaultOutput && !s.lastWord && errors.Is(err, storage.ErrAccessDenied) {
		return transient(err)
	}
	return classifyStoreWrite(err)
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
