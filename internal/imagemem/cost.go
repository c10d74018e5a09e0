package imagemem

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"io"

	"golang.org/x/image/webp"

	"github.com/locateanything/detect/engine/imageproc"
)

// Bytes per pixel a job or a /predict holds beyond the decoded image, measured with the engine's own
// steps (imageproc.Preprocess, overlay.Draw and its PNG encoder) on photographs and synthetic
// images of 1-4 megapixels.
const (
	// PrepareBytesPerPixel is Prepare's 8-bit RGB copy at the original size (3) and the
	// first resize pass working on it.
	PrepareBytesPerPixel = 4
	// OverlayBytesPerPixel is the overlay, drawn after the chip: its RGBA canvas (4) and the
	// PNG, its base64 and the JSON answer carrying it (2-3 bytes a pixel each for a photo).
	// Prepare's working copies are garbage by then, so it replaces PrepareBytesPerPixel.
	OverlayBytesPerPixel = 12
)

// Cost estimates from the image's header alone, reading no pixel, the bytes a job or a
// /predict holds for it at its peak: the encoded bytes, the decoded image as the decoder lays it out
// (decodedBytesPerPixel), and Prepare's working copies or, with an overlay, the overlay's.
// For bytes whose header cannot be read it is the encoded size alone: Prepare refuses those
// before decoding anything. w and h are the header's size (0 when unread).
func Cost(img []byte, overlay bool) (cost int64, w, h int) {
	cost = int64(len(img))
	format := imageproc.Sniff(img)
	var cfg image.Config
	var perPixel int64
	if format == imageproc.FormatJPEG {
		f, ok := readJPEGFrame(img)
		if !ok {
			return cost, 0, 0
		}
		cfg.Width, cfg.Height, perPixel = f.width, f.height, f.bytesPerPixel()
	} else {
		var ok bool
		if cfg, ok = imageHeader(format, img); !ok {
			return cost, 0, 0
		}
		perPixel = decodedBytesPerPixel(format, cfg.ColorModel, img)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return cost, 0, 0
	}
	perPixel += PrepareBytesPerPixel
	if overlay {
		perPixel += OverlayBytesPerPixel - PrepareBytesPerPixel
	}
	if format == imageproc.FormatGIF {
		cfg.Width, cfg.Height = gifCanvas(img, cfg.Width, cfg.Height)
	}
	px := int64(cfg.Width) * int64(cfg.Height) // below 2^62: each side is below 2^31
	if px > (1<<62)/perPixel {
		return 1 << 62, cfg.Width, cfg.Height
	}
	return cost + px*perPixel, cfg.Width, cfg.Height
}

// headerDecoders read the header of the formats the engine decodes (imageproc.Decode) but
// JPEG, whose frame header readJPEGFrame reads: the engine's libjpeg takes JPEGs (arithmetic
// coded ones) that image/jpeg does not.
var headerDecoders = map[string]func(io.Reader) (image.Config, error){
	imageproc.FormatPNG:  png.DecodeConfig,
	imageproc.FormatGIF:  gif.DecodeConfig,
	imageproc.FormatWebP: webp.DecodeConfig,
}

// imageHeader reads the image's header as the engine's decoder will.
func imageHeader(format string, img []byte) (cfg image.Config, ok bool) {
	decodeConfig, known := headerDecoders[format]
	if !known {
		return cfg, false
	}
	defer func() {
		if recover() != nil { // a decoder bug on hostile bytes: let Prepare refuse them
			ok = false
		}
	}()
	cfg, err := decodeConfig(bytes.NewReader(img))
	return cfg, err == nil
}

// decodedBytesPerPixel is what the decoders allocate per pixel for a PNG, GIF or WebP of
// this colour model, working buffers included.
func decodedBytesPerPixel(format string, m color.Model, img []byte) int64 {
	if _, paletted := m.(color.Palette); paletted { // compare no further: a Palette is a slice
		return 1
	}
	var bpp int64
	switch m {
	case color.GrayModel:
		bpp = 1
	case color.Gray16Model:
		bpp = 2
	case color.YCbCrModel, color.NYCbCrAModel, color.RGBAModel, color.NRGBAModel:
		bpp = 4
	default: // 16-bit colour and anything unexpected
		bpp = 8
	}
	switch format {
	case imageproc.FormatPNG:
		if len(img) > 28 && img[28] == 1 { // IHDR interlace method Adam7: passes, then merged
			bpp *= 2
		}
	case imageproc.FormatWebP:
		// Lossy WebP is turned into NRGBA with libwebp's colours (imageproc's webpColours);
		// lossless decodes through a 32-bit ARGB buffer.
		bpp += 4
	}
	return bpp
}

// jpegFrame is what a JPEG's frame header (SOFn) says.
type jpegFrame struct {
	width, height, components int
	progressive               bool
}

// bytesPerPixel is what decoding the frame allocates per pixel: the output (gray 1, colour
// as RGBA or full-resolution YCbCr 4, CMYK with its planes 8) and, for a progressive frame,
// a coefficient per sample kept until the last scan (an int32 in image/jpeg, 4 bytes per
// component; libjpeg's are 2).
func (f jpegFrame) bytesPerPixel() int64 {
	var bpp int64
	switch f.components {
	case 1:
		bpp = 1
	case 3:
		bpp = 4
	default:
		bpp = 8
	}
	if f.progressive {
		bpp += 4 * int64(f.components)
	}
	return bpp
}

// readJPEGFrame reads the frame header before the first scan: SOF0-SOF15 but DHT (C4), JPG
// (C8) and DAC (CC); SOF2, SOF6, SOF10 and SOF14 are progressive.
func readJPEGFrame(b []byte) (jpegFrame, bool) {
	for i := 2; i+4 <= len(b); {
		if b[i] != 0xFF {
			return jpegFrame{}, false
		}
		switch m := b[i+1]; {
		case m == 0xFF: // fill byte
			i++
		case m == 0x01 || (m >= 0xD0 && m <= 0xD8): // markers without a length
			i += 2
		case m == 0xDA: // start of scan before any frame header
			return jpegFrame{}, false
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC:
			if i+10 > len(b) {
				return jpegFrame{}, false
			}
			return jpegFrame{
				height:      int(b[i+5])<<8 | int(b[i+6]),
				width:       int(b[i+7])<<8 | int(b[i+8]),
				components:  int(b[i+9]),
				progressive: m&3 == 2,
			}, true
		default:
			i += 2 + (int(b[i+2])<<8 | int(b[i+3]))
		}
	}
	return jpegFrame{}, false
}

// gifCanvas is the size of the canvas PIL opens a GIF on: its logical screen (w x h), grown
// to hold the first frame where that reaches past it. It reads the blocks up to the first
// image descriptor; on anything unexpected it keeps w x h.
func gifCanvas(b []byte, w, h int) (int, int) {
	const screenEnd = 13 // "GIF89a", then the logical screen descriptor
	if len(b) < screenEnd {
		return w, h
	}
	i := screenEnd
	if packed := b[10]; packed&0x80 != 0 { // global colour table
		i += 3 << (packed&7 + 1)
	}
	for i < len(b) {
		switch b[i] {
		case 0x21: // extension: label, then sub-blocks up to an empty one
			i += 2
			for i < len(b) && b[i] != 0 {
				i += 1 + int(b[i])
			}
			i++
		case 0x2C: // image descriptor: left, top, width, height, little-endian
			if i+9 > len(b) {
				return w, h
			}
			u16 := func(at int) int { return int(b[at]) | int(b[at+1])<<8 }
			return max(w, u16(i+1)+u16(i+5)), max(h, u16(i+3)+u16(i+7))
		default:
			return w, h
		}
	}
	return w, h
}
