package storage

import (
	"errors"
	"fmt"
)

// Errors a caller classifies on. Every error a Store returns for a failure that retrying
// cannot fix wraps one of these; Permanent tells them from the rest, which are transient
// (the service or disk is down or slow, a timeout, credentials being fixed: worth another
// try later).
var (
	// ErrNotFound: no such object, bucket or file; a folder where a file was expected.
	ErrNotFound = errors.New("object not found")
	// ErrTooLarge: over the size limit, by the reported size or while reading.
	ErrTooLarge = errors.New("object over the size limit")
	// ErrBadURL: an unparsable URL, an unknown scheme, a name that is too long or that
	// the service or client refuses.
	ErrBadURL = errors.New("bad storage URL")
	// ErrNotAllowed: a location this Store refuses: file:// outside the roots, in a denied
	// folder or through a link out of them; something that is not a regular file (a FIFO,
	// device or socket, or a folder where a file is written); a scheme that is off.
	ErrNotAllowed = errors.New("location not allowed")
	// ErrAccessDenied: the service or the file system refuses this object to this caller
	// (S3 AccessDenied, EACCES, EPERM, a read-only file system).
	ErrAccessDenied = errors.New("access denied")
	// ErrRefused: any other request the S3 service answers with a 4xx status that no
	// retry changes (InvalidArgument, InvalidObjectState, MethodNotAllowed, ...).
	ErrRefused = errors.New("request refused by the storage service")
)

// Permanent reports whether err, from a Store, is a failure that retrying the same call
// cannot fix: it wraps one of ErrNotFound, ErrTooLarge, ErrBadURL, ErrNotAllowed,
// ErrAccessDenied or ErrRefused. Anything else (nil included) is not permanent.
func Permanent(err error) bool {
	for _, p := range [...]error{ErrNotFound, ErrTooLarge, ErrBadURL, ErrNotAllowed, ErrAccessDenied, ErrRefused} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// URLError says which part of a storage URL is wrong. It wraps ErrBadURL.
type URLError struct {
	URL    string
	Part   string // "url", "scheme", "bucket", "key" or "path"
	Reason string
}

func (e *URLError) Error() string {
	return fmt.Sprintf("bad storage URL %q: %s: %s", e.URL, e.Part, e.Reason)
}

// Unwrap makes errors.Is(err, ErrBadURL) true.
func (e *URLError) Unwrap() error { return ErrBadURL }
