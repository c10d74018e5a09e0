package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// Backoff is how long a publisher waits after a failed publish before trying again: First
// after the first failure, doubling up to Max. A full stream, a leader election or a broken
// connection all heal by waiting; a job is never dropped.
type Backoff struct {
	First time.Duration
	Max   time.Duration
}

// DefaultBackoff suits a stream that workers are draining.
var DefaultBackoff = Backoff{First: 100 * time.Millisecond, Max: 5 * time.Second}

func (b Backoff) next(d time.Duration) time.Duration {
	if d == 0 {
		return b.First
	}
	if d *= 2; d > b.Max {
		d = b.Max
	}
	return d
}

// publisher puts jobs on LA_JOBS, each with its id as Nats-Msg-Id, so that JetStream's
// duplicate window absorbs a publish repeated after a lost acknowledgement or a crash.
type publisher struct {
	js      jetstream.JetStream
	class   string
	backoff Backoff
	// warn is told about each failed attempt that will be retried.
	warn func(id string, attempt int, wait time.Duration, err error)
}

// Error codes of the JetStream API that no retry can change (nats-server's
// jetstream_errors_generated.go).
const (
	errCodeMessageTooLarge  jetstream.ErrorCode = 10054 // JSStreamMessageExceedsMaximumErr
	errCodeStreamNotMatch   jetstream.ErrorCode = 10060 // JSStreamNotMatchErr: the subject belongs to another stream
	errCodeStreamNotFound   jetstream.ErrorCode = 10059 // JSStreamNotFoundErr
	errCodeNotEnabledForAcc jetstream.ErrorCode = 10039 // JSNotEnabledForAccountErr
)

// permanentPublishError reports errors that waiting cannot fix. Everything else (a full
// stream, a timeout, no responders during a leader election, a reconnect) is retried.
func permanentPublishError(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case errCodeMessageTooLarge, errCodeStreamNotMatch, errCodeStreamNotFound, errCodeNotEnabledForAcc:
		return true
	}
	return false
}

// publish publishes job until JetStream acknowledges it, retrying with backoff. It returns
// an error only when ctx ends or the error is permanent. duplicate reports that JetStream
// had already stored a message with this id (an earlier run published it).
func (p *publisher) publish(ctx context.Context, job *jobs.Job) (duplicate bool, err error) {
	data, err := json.Marshal(job)
	if err != nil {
		return false, fmt.Errorf("job %s: encoding: %w", job.ID, err)
	}
	subject := jobs.JobSubject(p.class)
	var wait time.Duration
	for attempt := 1; ; attempt++ {
		ack, err := p.js.Publish(ctx, subject, data,
			jetstream.WithMsgID(job.ID), jetstream.WithExpectStream(jobs.JobsStream))
		if err == nil {
			return ack.Duplicate, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if permanentPublishError(err) {
			return false, fmt.Errorf("job %s: publishing to %s: %w", job.ID, subject, err)
		}
		wait = p.backoff.next(wait)
		if p.warn != nil {
			p.warn(job.ID, attempt, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}
