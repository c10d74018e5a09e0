package submit

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

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

// refusedByServer turns err into a PermissionError when the server refused one of nc's
// operations for want of permission.
func refusedByServer(nc *nats.Conn, err error) error {
	if err == nil || nc == nil {
		return err
	}
	if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) {
		return &PermissionError{Refused: last, Err: err}
	}
	return err
}

// Refused is err, as a PermissionError when the NATS server refused one of the Admin's
// operations for want of permission (the role to ask for is then in the message).
func (a *Admin) Refused(err error) error { return refusedByServer(a.js.Conn(), err) }
