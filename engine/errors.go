package engine

import (
	"errors"
	"fmt"
)

// The error kinds of package engine: a request refused for what it contains (InputError,
// with its codes), which the HTTP shim answers with 400 and a worker fails the job with,
// never retrying.

// Codes of InputError. Each is a permanent failure of the request: retrying cannot help.
const (
	CodeBadImage      = "bad_image"           // undecodable or unsupported bytes
	CodeImageTooLarge = "image_too_large"     // header over the pixel or byte limit
	CodeBadQuery      = "bad_query"           // empty or over-long query
	CodeBadTask       = "bad_task"            // unknown task
	CodePromptTooLong = "prompt_too_long"     // prompt + budget exceed the context
	CodeBadBudget     = "bad_budget"          // max_new_tokens out of range
	CodeBadGeneration = "bad_generation_mode" // unknown generation_mode
)

// InputError is a request the engine refuses because of what it contains. The HTTP shim
// answers it with 400; a worker ends the job as failed without retrying.
type InputError struct {
	Code string // one of the Code* constants
	Err  error
}

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// InputErrorf builds an *InputError with a formatted message.
func InputErrorf(code, format string, args ...any) *InputError {
	return &InputError{Code: code, Err: fmt.Errorf(format, args...)}
}

// AsInputError reports whether err is, or wraps, an *InputError.
func AsInputError(err error) (*InputError, bool) {
	var ie *InputError
	ok := errors.As(err, &ie)
	return ie, ok
}
