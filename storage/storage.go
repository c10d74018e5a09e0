// Package storage reads and writes objects by URL: s3://bucket/key through minio-go, and
// file:///abs/path under configured root directories for single-machine use.
package storage

import (
	"context"
	"errors"
)

// Errors a caller classifies on. Every error a Store returns wraps one of these when it
// applies; anything else is treated as transient (worth retrying later).
var (
	ErrNotFound   = errors.New("object not found")
	ErrTooLarge   = errors.New("object over the size limit")
	ErrBadURL     = errors.New("bad storage URL")
	ErrNotAllowed = errors.New("location not allowed") // file:// outside the roots, or off
)

// Object describes a stored object.
type Object struct {
	URL         string
	Size        int64
	ContentType string
}

// Store is the storage a worker and the submit CLI use.
type Store interface {
	// Stat describes the object at url.
	Stat(ctx context.Context, url string) (Object, error)
	// Get reads the whole object, refusing (ErrTooLarge) one over maxBytes, checked with
	// Stat first and enforced again while reading.
	Get(ctx context.Context, url string, maxBytes int64) ([]byte, error)
	// Put writes data at url with the given content type, replacing any object there.
	Put(ctx context.Context, url string, data []byte, contentType string) error
	// List calls fn for every object whose URL starts with prefix, in key order, until fn
	// returns false or an error occurs.
	List(ctx context.Context, prefix string, fn func(Object) bool) error
}
