package httpcompat

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/locateanything/detect/storage"
)

// ImageSource fetches an image named by URL: the storage layer's *storage.Router, with the
// roots (LA_FILE_ROOTS) and S3 credentials (LA_S3_*) the worker's jobs use.
type ImageSource interface {
	// Get reads the object at url, refusing one over maxBytes (the source's own image
	// limit, LA_MAX_IMAGE_BYTES, when maxBytes <= 0) with an error wrapping
	// storage.ErrTooLarge.
	Get(ctx context.Context, url string, maxBytes int64) ([]byte, error)
}

var _ ImageSource = (*storage.Router)(nil)

// fetchImage reads a request's image_url through Options.Images, within the time the body
// may take to arrive (the image stands in for it), and answers what went wrong: 400 when
// image URLs are off or the URL names nothing, 403 for a location the storage layer
// refuses, 413 over its image limit, 502 when the storage service fails.
func (s *Server) fetchImage(ctx context.Context, w http.ResponseWriter, r *http.Request, url string) ([]byte, bool) {
	if !s.cfg.ImageURLs {
		s.writeDetail(w, http.StatusBadRequest,
			"image_url is off on this server (LA_HTTP_IMAGE_URLS); send the image itself, as base64 in image or as a multipart/form-data file")
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	defer cancel()
	start := time.Now()
	img, err := s.opts.Images.Get(ctx, url, 0)
	if err == nil {
		s.log.Debug("predict: image fetched", "url", url, "bytes", len(img), "ms", time.Since(start).Milliseconds())
		return img, true
	}
	status := http.StatusBadGateway
	switch {
	case r.Context().Err() != nil:
		s.fail(w, r, err)
		return nil, false
	case errors.Is(err, storage.ErrTooLarge):
		status = http.StatusRequestEntityTooLarge
	case errors.Is(err, storage.ErrNotAllowed), errors.Is(err, storage.ErrAccessDenied):
		status = http.StatusForbidden
	case errors.Is(err, storage.ErrBadURL), errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrRefused):
		status = http.StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	}
	s.log.Info("predict: image_url refused", "status", status, "err", err)
	if status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
		w.Header().Set("Retry-After", "5")
	}
	s.writeDetail(w, status, "image_url: %v", err)
	return nil, false
}
