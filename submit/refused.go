package submit

import (
	"errors"

	"github.com/nats-io/nats.go"
)

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
