package imageproc

import (
	"bytes"
	"context"
	"fmt"
	"image"

	"github.com/locateanything/detect/engine"
)

// DefaultMaxPixels is the pixel budget Decode applies when given none: 40 megapixels
// (an 8K frame is 33). A decoded image costs 3 to 8 bytes per pixel depending on format.
const DefaultMaxPixels = 40_000_000

// Format names, as Decode returns them.
const (
	FormatJPEG = "jpeg"
	FormatPNG  = "png"
	FormatGIF  = "gif"
	FormatWebP = "webp"
)

// codec reads a format's header (the size PIL would give the image) and decodes it into
// the image.Image ToRGB turns into what PIL's to_rgb gives (see rgb.go).
type codec struct {
	config func(data []byte) (image.Config, error)
	decode func(ctx context.Context, data []byte, cfg image.Config) (image.Image, error) // stops when ctx ends
}

// codecs is chosen by magic bytes, not by image.RegisterFormat, so that the set of
// accepted formats is exactly this list whatever else the binary imports.
var codecs = map[string]codec{
	FormatJPEG: {jpegConfig, decodeJPEG},      // libjpeg-turbo, as PIL (jpeg.go)
	FormatPNG:  {pngConfig, decodePNG},        // image/png, alpha as PIL's modes (alpha.go)
	FormatGIF:  {gifConfig, decodeGIF},        // the first frame on PIL's canvas (gif.go)
	FormatWebP: {webpConfig, decodeWebPImage}, // x/image/webp, libwebp's colours (webp.go)
}

// Sniff names the format of encoded image bytes from their signature, or returns "".
func Sniff(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}):
		return FormatJPEG
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return FormatPNG
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return FormatGIF
	case len(data) >= 12 && bytes.Equal(data[:4], []byte("RIFF")) && bytes.Equal(data[8:12], []byte("WEBP")):
		return FormatWebP
	}
	return ""
}

// Decode decodes a JPEG, PNG, GIF (first frame) or WebP image. It reads the header first
// and refuses an image of more than maxPixels pixels before decoding any of it
// (maxPixels <= 0 means DefaultMaxPixels), so a small file claiming a huge size costs
// nothing. Errors are *engine.InputError: CodeImageTooLarge over the budget, CodeBadImage
// for empty, unknown, corrupt or truncated bytes. The returned string is the format.
//
// The image comes back in a type that tells ToRGB which of PIL's modes the file opens
// as: a JPEG is *image.RGBA (opaque), *image.Gray or *image.CMYK (as PIL stores it);
// *image.NRGBA and *image.NRGBA64 carry alpha only for what PIL opens as "RGBA" (the
// alpha PIL drops, of gray+alpha or a tRNS colour, is dropped here already); a GIF is
// its first frame on PIL's canvas with PIL's palette. EXIF orientation is ignored, as it
// is by the reference (PIL's Image.open).
func Decode(data []byte, maxPixels int64) (image.Image, string, error) {
	return decode(context.Background(), data, maxPixels, nil)
}

// Decode is the package's Decode with o.MaxPixels, which also refuses, from the header
// alone, an image whose patch grid under o would reach MaxGridSide (CodeImageTooLarge):
// a 1x40000000 strip is within a pixel budget but could never be preprocessed, so it
// should not be decoded either.
func (o Options) Decode(data []byte) (image.Image, string, error) {
	return o.DecodeContext(context.Background(), data)
}

// DecodeContext is Decode stopped by ctx: once ctx is done the decoder gives up at its
// next read (or stripe of scanlines, for JPEG) and the error wraps ctx.Err(); it is not
// an *engine.InputError.
func (o Options) DecodeContext(ctx context.Context, data []byte) (image.Image, string, error) {
	return decode(ctx, data, o.MaxPixels, func(w, h int) error {
		if err := o.Validate(); err != nil {
			return fmt.Errorf("image options: %w", err)
		}
		_, _, err := o.NativeSize(w, h)
		return err
	})
}

// decode is Decode with an optional check of the header's size before any pixel is read.
func decode(ctx context.Context, data []byte, maxPixels int64, checkSize func(w, h int) error) (img image.Image, format string, err error) {
	if maxPixels <= 0 {
		maxPixels = DefaultMaxPixels
	}
	if len(data) == 0 {
		return nil, "", engine.InputErrorf(engine.CodeBadImage, "image is empty (0 bytes)")
	}
	format = Sniff(data)
	c, ok := codecs[format]
	if !ok {
		// Neither the bytes nor their number: this message reaches results and dead-letter
		// records, and the "image" may be any file the worker can read.
		return nil, "", engine.InputErrorf(engine.CodeBadImage,
			"unrecognised image format; accepted: JPEG, PNG, GIF, WebP")
	}
	// The decoders return errors on bad input; this guard only makes sure that a decoder
	// bug on hostile bytes fails the one request instead of the whole worker.
	defer func() {
		if r := recover(); r != nil {
			img = nil
			err = engine.InputErrorf(engine.CodeBadImage, "%s: decoder failed on malformed data: %v", format, r)
		}
	}()
	cfg, err := c.config(data)
	if err != nil {
		return nil, format, &engine.InputError{Code: engine.CodeBadImage,
			Err: fmt.Errorf("%s header: %w", format, err)}
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, format, engine.InputErrorf(engine.CodeBadImage,
			"%s header claims a %dx%d image", format, cfg.Width, cfg.Height)
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > maxPixels {
		return nil, format, engine.InputErrorf(engine.CodeImageTooLarge,
			"%s image is %dx%d = %d pixels, over the limit of %d", format, cfg.Width, cfg.Height, px, maxPixels)
	}
	if checkSize != nil {
		if err := checkSize(cfg.Width, cfg.Height); err != nil {
			return nil, format, err
		}
	}
	if err := canceled(ctx, "decode "+format); err != nil {
		return nil, format, err
	}
	img, err = c.decode(ctx, data, cfg)
	if err := canceled(ctx, fmt.Sprintf("decode %s %dx%d", format, cfg.Width, cfg.Height)); err != nil {
		return nil, format, err // the decoder's error, if any, is only that its input stopped
	}
	if err != nil {
		return nil, format, &engine.InputError{Code: engine.CodeBadImage,
			Err: fmt.Errorf("decode %s %dx%d: %w", format, cfg.Width, cfg.Height, err)}
	}
	if b := img.Bounds(); b.Dx() != cfg.Width || b.Dy() != cfg.Height {
		return nil, format, engine.InputErrorf(engine.CodeBadImage,
			"%s decoded to %dx%d, not the %dx%d its header claims", format, b.Dx(), b.Dy(), cfg.Width, cfg.Height)
	}
	return img, format, nil
}
