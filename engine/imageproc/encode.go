package imageproc

import (
	"fmt"
	"image"

	"github.com/locateanything/detect/engine/imageproc/internal/libjpeg"
)

// JPEGOptions are the settings of EncodeJPEG.
type JPEGOptions struct {
	Quality int // 1..100, libjpeg's scale (cjpeg -quality)
	// Subsample420 halves the chroma resolution both ways (libjpeg's default); false keeps
	// it full (4:4:4).
	Subsample420 bool
	Optimize     bool // optimised Huffman tables
	Progressive  bool
}

// EncodeJPEG encodes img as a JFIF JPEG with the system libjpeg-turbo, the library that
// decodes JPEG here (accurate integer DCT, YCbCr). An opaque *image.RGBA (an overlay of
// an opaque picture, which is nearly every one) is read in place; anything else goes
// through ToRGB first, so transparency is pasted onto white, as the processor's to_rgb
// does. libjpeg's errors come back as errors, never as an exit.
func EncodeJPEG(img image.Image, o JPEGOptions) ([]byte, error) {
	if img == nil || img.Bounds().Empty() {
		return nil, fmt.Errorf("encode JPEG: image is empty")
	}
	b := img.Bounds()
	lo := libjpeg.EncodeOptions{Quality: o.Quality, Optimize: o.Optimize, Progressive: o.Progressive}
	if o.Subsample420 {
		lo.Subsampling = libjpeg.Chroma420
	}
	var (
		data []byte
		err  error
	)
	if m, ok := img.(*image.RGBA); ok && m.Opaque() {
		data, err = libjpeg.Encode(m.Pix[m.PixOffset(b.Min.X, b.Min.Y):], m.Stride, b.Dx(), b.Dy(), 4, lo)
	} else {
		var rgb *RGB
		if rgb, err = ToRGB(img); err == nil {
			data, err = libjpeg.Encode(rgb.Pix, 3*rgb.W, rgb.W, rgb.H, 3, lo)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("encode JPEG %dx%d: %w", b.Dx(), b.Dy(), err)
	}
	return data, nil
}
