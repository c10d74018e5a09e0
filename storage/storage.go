// Package storage reads and writes objects by URL: s3://bucket/key through minio-go, and
// file:///abs/path under configured root directories for single-machine use.
package storage

import (
	"context"
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
	// Delete removes the object at url; one that does not exist is no error.
	Delete(ctx context.Context, url string) error
	// List calls fn for every object whose URL starts with prefix, in key order, until fn
	// returns false or an error occurs.
	List(ctx context.Context, prefix string, fn func(Object) bool) error
}
