package storage

import (
	"context"
	"fmt"
)

// Router is the Store a worker uses: it parses each URL and hands it to the backend for its
// scheme. A scheme that is not configured is refused with ErrNotAllowed.
type Router struct {
	s3       *s3Store   // nil: s3:// is off (no endpoint)
	file     *fileStore // nil: file:// is off (no roots)
	maxBytes int64      // Get's limit when the caller gives none
}

var _ Store = (*Router)(nil)

// Open builds a Router from cfg. It checks the configuration and opens the file roots but
// makes no network request: an S3 service that is down shows in the first operations.
func Open(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	r := &Router{maxBytes: cfg.MaxImageBytes}
	if cfg.Endpoint != "" {
		s3, err := newS3Store(cfg)
		if err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
		r.s3 = s3
	}
	file, err := newFileStore(cfg.FileRoots, cfg.OutputRoots, cfg.Hidden)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	r.file = file
	return r, nil
}

// Close releases the file roots. The Router must not be used afterwards.
func (r *Router) Close() error {
	if r.file == nil {
		return nil
	}
	return r.file.close()
}

// MaxBytes is the limit Get applies when called with maxBytes <= 0.
func (r *Router) MaxBytes() int64 { return r.maxBytes }

// Stat describes the object at url.
func (r *Router) Stat(ctx context.Context, url string) (Object, error) {
	loc, err := r.route(url, false)
	if err != nil {
		return Object{}, err
	}
	var obj Object
	if loc.Scheme == SchemeS3 {
		obj, err = r.s3.stat(ctx, loc)
	} else {
		obj, err = r.file.stat(ctx, loc)
	}
	if err != nil {
		return Object{}, fmt.Errorf("stat %s: %w", url, err)
	}
	return obj, nil
}

// Get reads the object at url, refusing with ErrTooLarge one over maxBytes (the configured
// MaxImageBytes when maxBytes <= 0).
func (r *Router) Get(ctx context.Context, url string, maxBytes int64) ([]byte, error) {
	loc, err := r.route(url, false)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = r.maxBytes
	}
	var data []byte
	if loc.Scheme == SchemeS3 {
		data, err = r.s3.get(ctx, loc, maxBytes)
	} else {
		data, err = r.file.get(ctx, loc, maxBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	return data, nil
}

// Put writes data at url, replacing what is there. S3 stores contentType (default
// application/octet-stream); file:// writes atomically and has nowhere to keep it.
func (r *Router) Put(ctx context.Context, url string, data []byte, contentType string) error {
	loc, err := r.route(url, false)
	if err != nil {
		return err
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	if loc.Scheme == SchemeS3 {
		err = r.s3.put(ctx, loc, data, contentType)
	} else {
		err = r.file.put(ctx, loc, data)
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", url, err)
	}
	return nil
}

// Delete removes the object at url; one that does not exist is no error. file:// removes
// only a regular file, never a folder, a special file or a link (nor through one), and
// only below the roots it may write.
func (r *Router) Delete(ctx context.Context, url string) error {
	loc, err := r.route(url, false)
	if err != nil {
		return err
	}
	if loc.Scheme == SchemeS3 {
		err = r.s3.remove(ctx, loc)
	} else {
		err = r.file.remove(ctx, loc)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", url, err)
	}
	return nil
}

// List calls fn for each object whose URL starts with prefix, in key order, until fn
// returns false. s3://bucket/dir/ lists below dir/; s3://bucket/img lists img1.jpg,
// img2.jpg and img/x.jpg alike, as S3 prefixes do; file:// prefixes behave the same way.
func (r *Router) List(ctx context.Context, prefix string, fn func(Object) bool) error {
	loc, err := r.route(prefix, true)
	if err != nil {
		return err
	}
	if loc.Scheme == SchemeS3 {
		err = r.s3.list(ctx, loc, fn)
	} else {
		err = r.file.list(ctx, loc, fn)
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", prefix, err)
	}
	return nil
}

// route parses url and checks that its scheme is configured.
func (r *Router) route(url string, prefix bool) (Location, error) {
	var loc Location
	var err error
	if prefix {
		loc, err = ParsePrefix(url)
	} else {
		loc, err = ParseURL(url)
	}
	if err != nil {
		return Location{}, err
	}
	switch {
	case loc.Scheme == SchemeS3 && r.s3 == nil:
		return Location{}, fmt.Errorf("%s: %w: s3:// is not configured (set LA_S3_ENDPOINT)", url, ErrNotAllowed)
	case loc.Scheme == SchemeFile && r.file == nil:
		return Location{}, fmt.Errorf("%s: %w: file:// is off (set LA_FILE_ROOTS, and LA_OUTPUT_ROOTS, to the directories it may use)", url, ErrNotAllowed)
	}
	return loc, nil
}
