package submit

import (
	"errors"
	"fmt"
)

// The error kinds of the library. cmd/submit picks its exit code from them: an
// ArgumentError or ErrUnknownJob is the user's to fix (exit 2), ErrInterrupted is Ctrl-C,
// and the rest (a PermissionError included) is the system's.

// ArgumentError is a mistake in what the caller asked submit to work on: a file or prefix
// that does not exist, a manifest line, a query, a malformed batch name or job id. Fixing
// the argument, not retrying, is what helps. It is not a mistake in the command line's
// syntax (cmd/submit's cli.UsageError, which also prints the overview), and not a job's
// bad input, which the worker reports in the job's result (engine.InputError).
type ArgumentError struct{ Err error }

func (e *ArgumentError) Error() string { return e.Err.Error() }
func (e *ArgumentError) Unwrap() error { return e.Err }

// ErrUnknownJob is wrapped by the errors about a job id the system has no record of.
var ErrUnknownJob = errors.New("unknown job")

// ErrInterrupted is returned (wrapped) when ctx ends a run before every result arrived.
var ErrInterrupted = errors.New("interrupted before every result arrived")

// ErrNoBoxes says why an export wrote no results list: COCO's results format has no way
// to say "nothing found" that its tools read (pycocotools' loadRes looks at the first
// entry of the list, so an empty one fails), and a file that breaks the evaluation is
// worse than none.
var ErrNoBoxes = errors.New("COCO export: no boxes in this run's results, so " + COCOResultsFile +
	" is not written (an empty list is no results file COCO tools can load); " + COCOFile +
	" lists the images and categories with no annotations")

// PermissionError is a command the NATS server refused for want of permission: the
// user submit connected as does not have the role the command needs (docs/worker.md,
// "Roles": the producer role runs, looks up and cancels jobs; the dead-letter commands
// need the operator's).
type PermissionError struct {
	Refused error // the server's refusal: the subject and whether to publish or subscribe
	Err     error // what the command saw (often a timeout: a refused request is never answered)
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("%v: NATS refused this user the operation (%v): the dlq commands need the operator "+
		"role's credentials (LA_NATS_USER and LA_NATS_PASSWORD of the operator, or its LA_NATS_CREDS); "+
		"run, status, batches and cancel need the producer role", e.Err, e.Refused)
}

func (e *PermissionError) Unwrap() error { return e.Err }
