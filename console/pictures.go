package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"net/http"
	"strings"

	"golang.org/x/image/draw"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// Thumbnails: at most ThumbSize pixels on the long side, JPEG at thumbQuality, stored as
// <output>/<id>.thumb.jpg (jobs.ThumbSuffix) beside the overlay (or the result, when the job has no overlay).
const (
	ThumbSize    = 256
	thumbQuality = 80
	// maxThumbPixels bounds the pictures a thumbnail is made of, read from the header
	// before decoding: the largest image a job may give the engine is smaller.
	maxThumbPixels = 100_000_000
	maxThumbBytes  = 4 << 20
)

// picture is where a job's picture and its thumbnail are: the overlay when one is stored,
// else the input image; the thumbnail beside the overlay or the result ("" when the job
// has neither, and then no thumbnail is kept).
type picture struct {
	src, thumb string
}

func pictureOf(s summary) (picture, bool) {
	p := picture{src: s.overlay}
	switch {
	case s.overlay != "":
		p.thumb = strings.TrimSuffix(s.overlay, s.overlay[strings.LastIndex(s.overlay, "."):]) + jobs.ThumbSuffix
	case s.resultURL != "":
		p.thumb = strings.TrimSuffix(s.resultURL, ".json") + jobs.ThumbSuffix
	}
	if p.src == "" {
		p.src = s.image
	}
	if p.thumb == p.src || !strings.HasSuffix(p.thumb, s.id+jobs.ThumbSuffix) {
		p.thumb = "" // not a location the worker chose for this job: keep nothing there
	}
	return p, p.src != ""
}

// pictures serves job id's overlay or input image, whole or as a thumbnail. It reads only
// the URLs the job's result names, through the storage layer (its roots and credentials);
// nothing in the request is a path.
func (c *Console) pictures(w http.ResponseWriter, r *http.Request) {
	b := c.nats.Load()
	if b == nil {
		writeError(w, http.StatusServiceUnavailable, "starting: the console is not connected to NATS yet")
		return
	}
	id := r.PathValue("id")
	if !jobs.ValidResultID(id) {
		writeError(w, http.StatusBadRequest, "job id %q must be 1-128 characters of [A-Za-z0-9_-], or seq=<n>", id)
		return
	}
	size := r.URL.Query().Get("size")
	if size != "" && size != "thumb" && size != "full" {
		writeError(w, http.StatusBadRequest, "size %q: want thumb or full", size)
		return
	}
	if c.opts.Store == nil {
		writeError(w, http.StatusNotFound, "no storage is configured: pictures cannot be read")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.opts.OpTimeout)
	defer cancel()
	s, ok := c.idx.lookup(id)
	if !ok { // forgotten by the index, or not indexed yet: ask NATS
		_, res, err := c.lastResult(ctx, b.js, id)
		if err != nil {
			c.writeErr(w, r, err)
			return
		}
		if res == nil {
			writeError(w, http.StatusNotFound, "job %s has no result", id)
			return
		}
		s = summary{id: id, image: res.Image, resultURL: res.ResultURL}
		if res.OverlayURL != nil {
			s.overlay = *res.OverlayURL
		}
	}
	p, ok := pictureOf(s)
	if !ok {
		writeError(w, http.StatusNotFound, "job %s names no picture", id)
		return
	}
	var data []byte
	var err error
	if size == "thumb" {
		data, err = c.thumbnail(ctx, p)
	} else {
		data, err = c.opts.Store.Get(ctx, p.src, 0)
	}
	if err != nil {
		c.pictureError(w, r, id, err)
		return
	}
	ctype := http.DetectContentType(data)
	if !strings.HasPrefix(ctype, "image/") {
		writeError(w, http.StatusUnsupportedMediaType, "the picture of job %s is not an image", id)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "private, max-age=60")
	_, _ = w.Write(data)
}

// thumbRetryAfter is the Retry-After of a thumbnail that was not made in time.
const thumbRetryAfter = "5"

// pictureError answers a picture that could not be read: nothing when the browser has gone
// (it asked for a page it left); 503 with Retry-After for a thumbnail still waiting its
// turn when the request's time ran out (thumbnails are paced while the worker is busy: a
// browser on a running batch meets this often, so it is logged at debug level only); 404
// for one that is not there (or that the storage's roots refuse: the same answer, so the
// console tells nothing of what lies outside them); 502 when storage failed.
func (c *Console) pictureError(w http.ResponseWriter, r *http.Request, id string, err error) {
	if r.Context().Err() != nil {
		c.log.Debug("console: picture not sent: the browser went away", "job", id, "err", err)
		return
	}
	if errors.Is(err, errThumbNotReady) {
		c.log.Debug("console: thumbnail not made in time", "job", id, "err", err)
		w.Header().Set("Retry-After", thumbRetryAfter)
		writeError(w, http.StatusServiceUnavailable, "the thumbnail of job %s is not made yet (thumbnails wait while the worker is busy): try again shortly", id)
		return
	}
	if storage.Permanent(err) {
		writeError(w, http.StatusNotFound, "the picture of job %s cannot be read: %v", id, err)
		return
	}
	c.writeErr(w, r, err)
}

// thumbnail is p's thumbnail: the stored one, or one made now, one at a time (c.thumbs)
// on the thumbnail goroutine's low-priority thread, and stored for next time (best effort: a storage that refuses the write costs a remake).
// c.thumbs spans the whole making (the second look for a stored one, the source read,
// the decode, the store), so one source picture is in memory at a time and a picture
// asked for twice at once is made once; the goroutine (makeThumbLow) serialises only the
// decode, and is there for its thread's priority. Neither replaces the other.
func (c *Console) thumbnail(ctx context.Context, p picture) ([]byte, error) {
	if p.thumb != "" {
		if b, err := c.opts.Store.Get(ctx, p.thumb, maxThumbBytes); err == nil {
			return b, nil
		}
	}
	// Waiting for a turn is short: a page's thumbnails on a busy worker would otherwise
	// each hold a browser connection for the request's whole time (six per host on
	// HTTP/1.1, which the page's own API calls need too); a 503 is asked again by the page.
	turn, cancelTurn := context.WithTimeout(ctx, c.thumbTurn)
	defer cancelTurn()
	select {
	case c.thumbs <- struct{}{}:
	case <-turn.Done():
		return nil, fmt.Errorf("waiting to make a thumbnail: %w: %w", errThumbNotReady, turn.Err())
	}
	defer func() { <-c.thumbs }()
	if p.thumb != "" { // made by the request ahead of this one?
		if b, err := c.opts.Store.Get(ctx, p.thumb, maxThumbBytes); err == nil {
			return b, nil
		}
	}
	src, err := c.opts.Store.Get(ctx, p.src, 0)
	if err != nil {
		return nil, err
	}
	thumb, err := c.makeThumbLow(ctx, turn, src)
	if err != nil {
		return nil, err
	}
	if p.thumb != "" {
		if err := c.opts.Store.Put(ctx, p.thumb, thumb, "image/jpeg"); err != nil {
			c.log.Warn("console: thumbnail not stored", "url", p.thumb, "err", err)
		}
	}
	return thumb, nil
}

// makeThumb scales the picture in src down to at most ThumbSize on its long side (never
// up) and encodes it as JPEG.
func makeThumb(src []byte) ([]byte, error) {
	// The worker's own decoder: libjpeg-turbo for JPEG, the size refused from the header
	// before any pixel is decoded, a decoder's panic turned into an error.
	img, _, err := imageproc.Decode(src, maxThumbPixels)
	if ie, ok := engine.AsInputError(err); ok && ie.Code == engine.CodeImageTooLarge {
		return nil, fmt.Errorf("too large for a thumbnail: %v: %w", err, storage.ErrTooLarge)
	}
	if err != nil {
		return nil, errNotPicture
	}
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	if long := max(w, h); long > ThumbSize {
		w, h = max(1, w*ThumbSize/long), max(1, h*ThumbSize/long)
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.ApproxBiLinear.Scale(dst, dst.Bounds(), img, img.Bounds(), draw.Src, nil)
	var out bytes.Buffer
	if err := jpeg.Encode(&out, dst, &jpeg.Options{Quality: thumbQuality}); err != nil {
		return nil, fmt.Errorf("encode a thumbnail: %w", err)
	}
	return out.Bytes(), nil
}
