package cli

import (
	"errors"
	"fmt"
)

// UsageError is a mistake in a command line or in a program's configuration: the user
// must change what they typed or set, and retrying cannot help. The worker, its tools and
// submit exit 2 on it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef formats a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{Err: fmt.Errorf(format, args...)}
}

// IsUsage reports whether err is, or wraps, a UsageError.
func IsUsage(err error) bool {
	var ue UsageError
	return errors.As(err, &ue)
}
