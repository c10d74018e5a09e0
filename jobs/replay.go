package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/storage"
)

// maxJobBytes bounds a dead-lettered job read from storage; a job is one NATS message.
const maxJobBytes = 64 << 20

// Replay publishes the dead-lettered job of rec (the latest record of its id, at stream
// sequence seq in LA_DLQ) again, after its cause is fixed. It sets the job's state back to
// queued, clears any cancel request (a worker skips a job whose state is terminal) and
// releases the id's claim (so that the new message owns it), publishes the original job
// bytes (from the record, or from its job_url for a job too large to carry; store may be
// nil when none is) to their original subject, and removes every dead-letter record of the
// job. The publish carries a fresh Nats-Msg-Id (RepublishMsgID: replay.<id>.<dlq sequence>)
// so that the duplicate window does not swallow it. `submit dlq replay` and the console both replay
// through it.
func Replay(ctx context.Context, js jetstream.JetStream, state *StateStore, store storage.Store, seq uint64, rec DLQRecord) error {
	id := rec.ID
	if rec.Code == CodeDuplicateID {
		return fmt.Errorf("job %s cannot be replayed: its latest record is of a message that lost the id to another job (%s); "+
			"submit that job under an id of its own: %w", id, CodeDuplicateID, ErrNotReplayable)
	}
	data, err := deadLetteredJob(ctx, store, rec)
	if err != nil {
		return err
	}
	job, err := DecodeJob(data)
	if err != nil {
		return fmt.Errorf("job %s cannot be replayed: the job itself is invalid (%v); fix it and submit it again: %w", id, err, ErrNotReplayable)
	}
	subject := rec.Subject
	if !strings.HasPrefix(subject, JobSubjectPrefix) {
		subject = JobSubject(DefaultClass)
	}
	if err := Republish(ctx, js, state, subject, job.ID, data, RepublishMsgID("replay", id, seq)); err != nil {
		return fmt.Errorf("replay job %s: %w", id, err)
	}
	st, err := js.Stream(ctx, DLQStream)
	if err != nil {
		return fmt.Errorf("replay job %s: stream %s: %w", id, DLQStream, err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(DLQSubject(id))); err != nil {
		return fmt.Errorf("replay job %s: published, but its dead-letter record stays: %w", id, err)
	}
	return nil
}

// RepublishMsgID is the Nats-Msg-Id of the seq-th publish-again (kind "replay" or "retry")
// of job id: <kind>.<id>.<seq>. Producers publish a job under its id, and a job id has no
// dots (ValidToken), so no job's own message id can equal it and make the duplicate window
// swallow the publish (as a job named <id>-retry-<seq> could under the old scheme).
func RepublishMsgID(kind, id string, seq uint64) string {
	return fmt.Sprintf("%s.%s.%d", kind, id, seq)
}

// Republish publishes data, the message of job id that ended (failed, canceled, expired),
// to subject again so that it runs once more. A worker acknowledges without running a
// message whose job's state is terminal, or whose id another message's claim holds, so
// both must be cleared before the message can be delivered: it clears any cancel request,
// sets the job's state back to queued, releases the id's claim, and only then publishes
// under msgID (RepublishMsgID), which must differ from every earlier message's. When the
// publish fails, or JetStream acknowledges it as a duplicate (a message with msgID is
// already in the window, so none was stored), the job's previous state and claim are put
// back, so it is not left queued with no message, and an error is returned. Replay and
// `submit retry` publish through it; it needs the state bucket's write permission (the
// operator's role).
func Republish(ctx context.Context, js jetstream.JetStream, state *StateStore, subject, id string, data []byte, msgID string) error {
	kv := state.KV()
	prevState, err := entry(ctx, kv, id)
	if err != nil {
		return fmt.Errorf("read the state of job %s: %w", id, err)
	}
	prevClaim, err := entry(ctx, kv, ClaimKey(id))
	if err != nil {
		return fmt.Errorf("read the claim of job %s: %w", id, err)
	}
	if err := kv.Delete(ctx, CancelKey(id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("clear its cancel request: %w", err)
	}
	if err := state.Put(ctx, id, State{Status: StatusQueued}); err != nil {
		return err
	}
	if err := state.ReleaseClaim(ctx, id); err != nil {
		return errors.Join(err, restore(ctx, kv, id, prevState, prevClaim))
	}
	ack, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(JobsStream))
	switch {
	case err != nil:
		err = fmt.Errorf("publish to %s: %w", subject, err)
	case ack.Duplicate:
		err = fmt.Errorf("publish to %s: JetStream acknowledged it as a duplicate of the message with id %s "+
			"(stream sequence %d) and stored nothing", subject, msgID, ack.Sequence)
	default:
		return nil
	}
	return errors.Join(err, restore(ctx, kv, id, prevState, prevClaim))
}

// entry is the value of key, nil when the bucket has none.
func entry(ctx context.Context, kv jetstream.KeyValue, key string) ([]byte, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// restore puts back the state and claim job id had before a Republish whose publish did
// not happen. A claim another message took in between is left to it.
func restore(ctx context.Context, kv jetstream.KeyValue, id string, state, claim []byte) error {
	var errs []error
	if state == nil {
		if err := kv.Delete(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			errs = append(errs, fmt.Errorf("remove the queued state of job %s: %w", id, err))
		}
	} else if _, err := kv.Put(ctx, id, state); err != nil {
		errs = append(errs, fmt.Errorf("restore the state of job %s: %w", id, err))
	}
	if claim != nil {
		if _, err := kv.Create(ctx, ClaimKey(id), claim); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			errs = append(errs, fmt.Errorf("restore the claim of job %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// deadLetteredJob is the original job message of a dead-letter record: carried in it, or,
// for a job too large to carry, read from where the worker stored it (job_url).
func deadLetteredJob(ctx context.Context, store storage.Store, rec DLQRecord) ([]byte, error) {
	switch {
	case len(rec.Job) > 0:
		return rec.Job, nil
	case len(rec.JobBase64) > 0:
		return rec.JobBase64, nil
	case rec.JobURL == "":
		return nil, fmt.Errorf("job %s cannot be replayed: its dead-letter record holds no job (it was too large to carry and could not be stored): %w", rec.ID, ErrNotReplayable)
	case store == nil:
		return nil, fmt.Errorf("job %s is stored at %s: storage is not configured (LA_S3_* or LA_FILE_ROOTS)", rec.ID, rec.JobURL)
	}
	data, err := store.Get(ctx, rec.JobURL, maxJobBytes)
	if err != nil {
		return nil, fmt.Errorf("job %s: read %s: %w", rec.ID, rec.JobURL, err)
	}
	return data, nil
}
