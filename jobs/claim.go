package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// CodeDuplicateID fails a job message whose id another message, with other content, owns.
const CodeDuplicateID = "duplicate_id"

// ClaimKeyPrefix starts the state-bucket key that records which job message owns a job id:
// claim.<id>. Job ids contain no dots, so it collides with no state or cancel key.
const ClaimKeyPrefix = "claim."

// ClaimKey is the state-bucket key of job id's claim.
func ClaimKey(id string) string { return ClaimKeyPrefix + id }

// Claim is the value of a claim.<id> entry: the job message that owns the id. The first
// worker to handle a message with that id creates it (a key-value Create, so of two
// messages racing exactly one wins); it lives as long as every entry of the bucket
// (LA_STATE_MAX_AGE), which is how long a job id stays taken.
type Claim struct {
	StreamSeq uint64    `json:"stream_seq"` // the owner's sequence in LA_JOBS
	Subject   string    `json:"subject"`    // the subject it was published to
	Batch     string    `json:"batch"`      // its batch, as its result names it
	Digest    string    `json:"digest"`     // SHA-256 of its bytes, hex
	Worker    string    `json:"worker"`     // who claimed it
	ClaimedAt time.Time `json:"claimed_at"`
}

// claimOutcome is what a message meets when it claims its job id.
type claimOutcome int

const (
	// claimOwned: the message owns the id (it took it now, or on an earlier delivery).
	claimOwned claimOutcome = iota
	// claimResubmitted: another message with the same bytes owns it; that one's result is
	// the answer.
	claimResubmitted
	// claimLost: another message with other bytes owns it.
	claimLost
)

// claimTries bounds the Create-then-Get rounds of one claim: a claim seen and then gone
// (deleted or expired in between) is tried again, but not forever.
const claimTries = 3

// claim takes id for the message c describes, or says who has it. An error is transient:
// the bucket could not be read or written.
func (s *StateStore) claim(ctx context.Context, id string, c Claim) (claimOutcome, Claim, error) {
	if c.ClaimedAt.IsZero() {
		c.ClaimedAt = time.Now().UTC()
	}
	b, err := json.Marshal(c)
	if err != nil {
		return 0, Claim{}, fmt.Errorf("encode claim of job %s: %w", id, err)
	}
	for range claimTries {
		_, err := s.kv.Create(ctx, ClaimKey(id), b)
		if err == nil {
			return claimOwned, c, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, Claim{}, fmt.Errorf("claim job %s: %w", id, err)
		}
		e, err := s.kv.Get(ctx, ClaimKey(id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released or expired since: try to take it again
		}
		if err != nil {
			return 0, Claim{}, fmt.Errorf("read the claim of job %s: %w", id, err)
		}
		var owner Claim
		if err := json.Unmarshal(e.Value(), &owner); err != nil {
			// Not written by a worker: whoever wrote it holds the id all the same.
			return claimLost, Claim{Batch: "unknown (its claim entry is not a worker's)"}, nil
		}
		switch {
		case owner.StreamSeq == c.StreamSeq:
			return claimOwned, owner, nil
		case owner.Digest == c.Digest:
			return claimResubmitted, owner, nil
		}
		return claimLost, owner, nil
	}
	return 0, Claim{}, fmt.Errorf("claim job %s: its claim kept disappearing", id)
}

// ReleaseClaim deletes job id's claim, so that the next message with that id owns it and
// runs (submit dlq replay does this before publishing a job again).
func (s *StateStore) ReleaseClaim(ctx context.Context, id string) error {
	if err := s.kv.Delete(ctx, ClaimKey(id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("release the claim of job %s: %w", id, err)
	}
	return nil
}

// ClaimOf reads job id's claim: the message that owns the id. ok is false when none does.
// A claim entry that is not a worker's reads as a Claim with no digest, matching no job.
func (s *StateStore) ClaimOf(ctx context.Context, id string) (c Claim, ok bool, err error) {
	e, err := s.kv.Get(ctx, ClaimKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, fmt.Errorf("read the claim of job %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return Claim{}, true, nil
	}
	return c, true, nil
}

// Digest is the hex SHA-256 of a job message's bytes, as a claim's Digest holds it: two
// messages with the same digest are the same job.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// claimJob claims job.ID for the message orig. On claimOwned the job goes on; otherwise
// nothing of the owner's may be written.
func (s *sink) claimJob(ctx context.Context, job *Job, orig *original) (claimOutcome, Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	return s.topo.State.claim(ctx, job.ID, Claim{
		StreamSeq: orig.streamSeq, Subject: orig.subject, Batch: job.Batch,
		Digest: Digest(orig.data), Worker: s.worker,
	})
}

// lostResult is the failed result of a message (at stream sequence seq) whose job id
// owner has; why is the message's own defect, if it had one.
func lostResult(job *Job, attempt int, seq uint64, owner Claim, why error) *Result {
	res := newResult(job, attempt)
	res.Status = StatusFailed
	msg := fmt.Sprintf("job id %s belongs to batch %s (the job message at stream sequence %d, with other content); "+
		"this message (stream sequence %d, batch %s) was not run and wrote nothing of that job's",
		job.ID, owner.Batch, owner.StreamSeq, seq, job.Batch)
	if why != nil {
		msg += "; it was also invalid: " + why.Error()
	}
	res.Error = &ErrorInfo{Code: CodeDuplicateID, Message: msg}
	return res
}

// settleClaim claims job.ID for the message orig and ends that message when it does not
// own the id: a resubmission (same bytes) needs nothing, its owner's result answers it; a
// loser (other bytes) gets its duplicate_id failure published and dead-lettered
// (finishLost), which is returned. attempt is the message's delivery count, why its own
// defect if it had one. An error is transient: nothing of the owner's was touched.
func (s *sink) settleClaim(ctx context.Context, job *Job, orig *original, attempt int, why error) (claimOutcome, *Result, error) {
	outcome, owner, err := s.claimJob(ctx, job, orig)
	if err != nil || outcome != claimLost {
		return outcome, nil, err
	}
	res := lostResult(job, attempt, orig.streamSeq, owner, why)
	if err := s.finishLost(ctx, res, orig); err != nil {
		return outcome, nil, fmt.Errorf("end job %s as %s: %w", job.ID, CodeDuplicateID, err)
	}
	s.metrics.outcome(OutcomeFailed)
	s.log.Warn("job ended", "id", job.ID, "stream_seq", orig.streamSeq, "attempt", attempt,
		"status", res.Status, "code", CodeDuplicateID, "reason", res.Error.Message)
	return outcome, res, nil
}

// finishLost publishes res, the failed result of a message that lost its job id, on
// la.results.<its batch>.<id> and dead-letters it. It stores no result and writes no state:
// the result file, overlay and state of that id are the owner's. The record's job bytes,
// when too large to carry, go to <default output>/<id>=lost-<seq>.job.json. Both messages
// are keyed by this message's stream sequence, so a redelivery repeats nothing.
func (s *sink) finishLost(ctx context.Context, res *Result, orig *original) error {
	res.Worker = s.worker
	res.FinishedAt = time.Now().UTC()
	res.ResultURL = ""
	body, err := s.resultMessage(res)
	if err != nil {
		return err
	}
	msgID := fmt.Sprintf("%s-%d", res.ID, orig.streamSeq)
	ctx, span := s.span(ctx, SpanPublish, attribute.Bool("la.dead_letter", true))
	err = s.publish(ctx, ResultSubject(res.Batch, res.ID), body, msgID)
	if err == nil {
		spill := *orig
		spill.spill = lostJobName(res.ID, orig.streamSeq)
		err = s.deadLetter(ctx, res, &spill, msgID, "")
	}
	endSpan(span, err)
	return err
}

// claimed claims the job id of the message of a. ok: the message owns it and the job goes
// on. Otherwise the message ends with the returned settlement: acked when it resubmits its
// owner's job, terminated after its duplicate_id failure, or given back when the claim
// could not be read or the failure not written for now.
func (r *Runner) claimed(ctx context.Context, log *slog.Logger, job *Job, a *attemptInfo, decodeErr error) (s settlement, ok bool) {
	outcome, lost, err := r.sink.settleClaim(ctx, job, &a.orig, a.attempt, decodeErr)
	switch {
	case err != nil:
		return r.retry(ctx, log, *a, err), false
	case outcome == claimOwned:
		a.owner = true
		return settlement{}, true
	case outcome == claimResubmitted:
		log.Info("the same job was published again as another message; acknowledged without running, the first one's result answers it")
		r.cfg.Metrics.outcome(OutcomeDuplicate)
		return settlement{kind: settleAck}, false
	}
	trace.SpanFromContext(ctx).SetStatus(codes.Error, CodeDuplicateID+": "+lost.Error.Message)
	return settlement{kind: settleTerm, reason: CodeDuplicateID + ": " + lost.Error.Message}, false
}
