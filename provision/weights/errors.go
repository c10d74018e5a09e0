package weights

import (
	"errors"
	"fmt"
	"net/http"
)

// The error kinds of package weights: a snapshot not in the cache (ErrNotCached), and an
// HTTP answer of the Hub other than the one expected (statusError).

// ErrNotCached is wrapped by Resolve's error when the snapshot is simply not in the cache
// (nothing of it there) and no download was asked for; a snapshot that is there but
// incomplete is a different error.
var ErrNotCached = errors.New("not in the Hugging Face cache")

// statusError is an HTTP answer other than the one expected.
type statusError struct {
	url  string
	code int
	hint string
}

func (e *statusError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.url, e.code)
	if e.hint != "" {
		msg += " (" + e.hint + ")"
	}
	return msg
}

// retryable: server errors and throttling may pass; other answers will not change.
func (e *statusError) retryable() bool {
	return e.code >= 500 || e.code == http.StatusTooManyRequests || e.code == http.StatusRequestTimeout
}
