package jobs

import "errors"

// The error kinds of package jobs: the causes a job's context is cancelled with, and what
// the Runner and the sink classify a failure by (a result code, a retry), and Replay's
// refusals.

// ErrCancelRequested is the cause of a job context cancelled by a cancel.<id> request.
var ErrCancelRequested = errors.New("cancel requested")

// errExpired stops a job whose deadline passed before it reached the chip.
var errExpired = errors.New("deadline passed")

// ErrShuttingDown is the cause of a job context cancelled because the grace period after
// shutdown ran out; the job is given back to the queue unfinished.
var ErrShuttingDown = errors.New("worker shutting down")

// jobError is a permanent failure with its result code.
type jobError struct {
	code string
	err  error
}

func (e *jobError) Error() string { return e.err.Error() }
func (e *jobError) Unwrap() error { return e.err }

// transientError marks an error that a later attempt may not meet (storage or NATS down).
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

func transient(err error) error { return &transientError{err: err} }

func isTransient(err error) bool {
	var te *transientError
	return errors.As(err, &te)
}

// errDocument marks a refusal of the message as a whole (not JSON, not an object, a
// member name twice) rather than of one field.
var errDocument = errors.New("job is not valid JSON of the job schema")

// errPartMissing marks a topology object that the server does not have.
var errPartMissing = errors.New("missing")

// ErrNotReplayable is wrapped by Replay's refusals that no retry changes: a record of a
// message that lost its id (duplicate_id), a record holding no job, a job that is itself
// invalid.
var ErrNotReplayable = errors.New("not replayable")
