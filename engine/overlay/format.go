package overlay

import (
	"fmt"
	"image"

	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/internal/settings"
)

// Format is how an overlay picture is encoded: the `overlay_format` of a job.
type Format string

const (
	// PNG is lossless, and what /predict's overlay_png_b64 is. The default.
	PNG Format = "png"
	// JPEG is libjpeg-turbo at JPEGQuality with full-resolution chroma: about a fifth of
	// the PNG's size and a third of its encode time on a 1080p photo (docs/images.md).
	JPEG Format = "jpeg"
)

// Formats lists the formats, the default first.
var Formats = settings.Set[Format]{PNG, JPEG}

// Valid reports whether f names a format.
func (f Format) Valid() bool { return Formats.Has(f) }

// Ext is the file extension of f, with its dot: ".png" or ".jpg".
func (f Format) Ext() string {
	if f == JPEG {
		return ".jpg"
	}
	return ".png"
}

// ContentType is the media type of f.
func (f Format) ContentType() string {
	if f == JPEG {
		return "image/jpeg"
	}
	return "image/png"
}

// JPEGQuality is the libjpeg quality (cjpeg's scale) of JPEG overlays. An overlay is a
// photo with thin lines and small text in saturated colours on top: at 90 the drawn
// pixels come back within a few levels (mean 2.4, 99th percentile 10, on a 1080p photo
// with ten labelled boxes); 85 saves 12 % of the bytes for 40 % more error on them, 95
// costs 37 % more bytes for a difference nobody sees.
const JPEGQuality = 90

// jpegOptions are the settings of JPEG overlays. Chroma is kept at full resolution
// (4:4:4): with 4:2:0 a 3-px box line or a tag's edge shares its chroma with the photo
// next to it, and the drawn pixels come back about 12 levels off on average (35 at the
// 99th percentile), visibly paler at their edges, for a file 18 % smaller and half the
// encode time. Optimised Huffman tables save 2 % and progressive coding 4 %, for 2.5 and
// 3.8 times the encode time: both off. docs/images.md has the measurements
// (BenchmarkJPEGSettings).
var jpegOptions = imageproc.JPEGOptions{Quality: JPEGQuality}

// EncodeJPEG encodes img as a JPEG overlay (JPEGQuality, 4:4:4, baseline) with
// libjpeg-turbo and returns a slice the caller owns. An opaque *image.RGBA (what Draw
// returns for every opaque picture) is read in place; transparency, which JPEG cannot
// hold, is pasted onto white, as the model saw it.
func (e *Encoder) EncodeJPEG(img image.Image) ([]byte, error) {
	if img == nil || img.Bounds().Empty() {
		return nil, fmt.Errorf("encode overlay JPEG: image is empty")
	}
	data, err := imageproc.EncodeJPEG(img, jpegOptions)
	if err != nil {
		return nil, fmt.Errorf("encode overlay: %w", err)
	}
	return data, nil
}

// Encode encodes img in format f.
func (e *Encoder) Encode(img image.Image, f Format) ([]byte, error) {
	switch f {
	case PNG:
		return e.EncodePNG(img)
	case JPEG:
		return e.EncodeJPEG(img)
	}
	return nil, fmt.Errorf("encode overlay: unknown format %q (one of %v)", f, Formats)
}
