package httpcompat

import (
	"errors"
	"fmt"
	"time"
)

// The error kinds of package httpcompat: the server turned off by its configuration, and a
// request body cut by its read deadline (answered 408).

// errDisabled is New's answer to a Config whose address turns the server off.
var errDisabled = errors.New("http config: LA_HTTP_ADDR is off: the /predict server is disabled")

// slowBodyError is a body cut by its read deadline: answered 408.
type slowBodyError struct {
	kind    deadlineKind
	n       int64         // bytes received
	elapsed time.Duration // since the handler started
	cfg     Config
}

func (e *slowBodyError) Error() string {
	switch e.kind {
	case cutStalled:
		return fmt.Sprintf("the request body stalled: no data for %v after %d bytes (LA_HTTP_BODY_TIMEOUT)",
			e.cfg.BodyTimeout, e.n)
	case cutSlow:
		return fmt.Sprintf("the request body arrived too slowly: %d bytes in %v, under the minimum of %d bytes/s (LA_HTTP_MIN_BODY_RATE)",
			e.n, e.elapsed.Round(time.Millisecond), e.cfg.MinBodyRate)
	default:
		return fmt.Sprintf("the request body did not arrive within %v (LA_HTTP_READ_TIMEOUT)", e.cfg.ReadTimeout)
	}
}
