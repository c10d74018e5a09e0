package httpcompat

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// The /predict body is read under read deadlines that follow its progress, so a client that
// sends slowly or stops cannot hold a connection and an upload slot for the whole
// ReadTimeout. Before each read the connection's deadline becomes the earliest of
//
//   - the last progress plus BodyTimeout (a stall),
//   - the handler's start (the end of the headers) plus BodyTimeout plus bytes-so-far /
//     MinBodyRate (too slow on average: BodyTimeout is the grace, then the rate must hold),
//   - the handler's start plus ReadTimeout (the whole request's limit, as before).
//
// net/http clears the deadline itself once the body has been read to its end (its
// background read, which notices a client that goes away, must not time out), so nothing
// here outlives the body.

// deadlineKind says which of the three limits cut a body.
type deadlineKind int

const (
	cutStalled deadlineKind = iota // no byte for BodyTimeout
	cutSlow                        // under MinBodyRate on average
	cutTotal                       // ReadTimeout
)

// pacedBody reads a request body under the deadlines above.
type pacedBody struct {
	r     io.Reader
	rc    *http.ResponseController // nil: the connection takes no deadlines (a test's recorder)
	cfg   Config
	start time.Time
	n     int64
	kind  deadlineKind // which limit the current deadline is
}

func newPacedBody(w http.ResponseWriter, r io.Reader, cfg Config, start time.Time) *pacedBody {
	b := &pacedBody{r: r, rc: http.NewResponseController(w), cfg: cfg, start: start}
	if err := b.rc.SetReadDeadline(start.Add(cfg.ReadTimeout)); errors.Is(err, http.ErrNotSupported) {
		b.rc = nil
	}
	return b
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.rc != nil {
		_ = b.rc.SetReadDeadline(b.deadline(time.Now()))
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err != nil && isTimeout(err) {
		return n, &slowBodyError{kind: b.kind, n: b.n, elapsed: time.Since(b.start), cfg: b.cfg}
	}
	return n, err
}

// deadline is the earliest of the three limits at now, and records which one it is.
func (b *pacedBody) deadline(now time.Time) time.Time {
	d, kind := now.Add(b.cfg.BodyTimeout), cutStalled
	if slow := b.start.Add(b.cfg.BodyTimeout + rateAllowance(b.n, b.cfg.MinBodyRate)); slow.Before(d) {
		d, kind = slow, cutSlow
	}
	if total := b.start.Add(b.cfg.ReadTimeout); total.Before(d) {
		d, kind = total, cutTotal
	}
	b.kind = kind
	return d
}

// rateAllowance is how long n bytes may take at rate bytes per second, without overflow.
func rateAllowance(n, rate int64) time.Duration {
	whole, part := n/rate, n%rate
	if whole > int64(time.Duration(1<<62)/time.Second) {
		return time.Duration(1 << 62)
	}
	return time.Duration(whole)*time.Second + time.Duration(part)*time.Second/time.Duration(rate)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// readBody reads the whole /predict body within MaxBodyBytes and the pace above.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, start time.Time) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, io.NopCloser(newPacedBody(w, r.Body, s.cfg, start)), s.cfg.MaxBodyBytes))
}

// writeBodyError answers a body that could not be read: 413 over MaxBodyBytes, 408 too
// slow (the connection is closed: the rest of the body will not be read), 400 otherwise.
func (s *Server) writeBodyError(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	var slow *slowBodyError
	switch {
	case errors.As(err, &tooBig):
		s.writeDetail(w, http.StatusRequestEntityTooLarge,
			"request body is over the %d-byte limit (LA_HTTP_MAX_BODY_BYTES)", tooBig.Limit)
	case errors.As(err, &slow):
		s.log.Warn("predict: request body too slow", "status", http.StatusRequestTimeout, "err", slow)
		w.Header().Set("Connection", "close")
		s.writeDetail(w, http.StatusRequestTimeout, "%s", slow.Error())
	default:
		s.writeDetail(w, http.StatusBadRequest, "cannot read the request body: %v", err)
	}
}
