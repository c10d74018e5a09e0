package imageproc

import (
	"fmt"
	"image"
	"image/color"
)

// RGB is an 8-bit RGB image, 3 bytes per pixel, rows packed without padding. It is the
// layout every resize and the patchify step work on (PIL mode "RGB").
type RGB struct {
	Pix  []uint8 // len = 3 * W * H
	W, H int
}

// NewRGB allocates a black w x h image.
func NewRGB(w, h int) *RGB {
	return &RGB{Pix: make([]uint8, 3*w*h), W: w, H: h}
}

// ToRGB converts a decoded image the way PIL's Image.convert("RGB") converts the image
// PIL would have opened from the same file:
//
//   - alpha is dropped, not composited (RGBA, LA, NRGBA, NYCbCrA): the colour channels are
//     kept as stored, unpremultiplied;
//   - palette images take the palette's colour (a transparent entry keeps its colour when
//     the decoder kept it: Go's PNG decoder does, Go's GIF decoder stores it as black);
//   - gray is replicated to the three channels;
//   - 16-bit RGB(A) keeps the high byte (PIL unpacks "RGB;16B" that way);
//   - 16-bit gray clips at 255, because PIL opens it as 32-bit mode "I" and "I" -> "RGB"
//     clamps to 0..255 (a 16-bit gray PNG therefore comes out mostly white, as in PIL);
//   - CMYK uses PIL's formula, channel = 255 - k - c*(255-k)/255 rounded as PIL rounds;
//   - YCbCr goes through libjpeg's chroma upsampling and fixed-point conversion (see
//     ycbcr.go), as PIL's JPEG decoder does; Decode has already turned a lossy WebP into
//     NRGBA with libwebp's colours (webp.go).
//
// EXIF orientation is not applied, as PIL's Image.open does not apply it either.
func ToRGB(img image.Image) (*RGB, error) {
	if img == nil {
		return nil, fmt.Errorf("no image")
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("image has no pixels (%dx%d)", w, h)
	}
	out := NewRGB(w, h)
	if b.Min != (image.Point{}) {
		// Decoders return images anchored at the origin; anything else (a sub-image, a GIF
		// frame with an offset) takes the slow, always-correct path.
		convertGeneric(out, img)
		return out, nil
	}
	switch m := img.(type) {
	case *image.YCbCr:
		ycbcrToRGB(out, m)
	case *image.NYCbCrA:
		ycbcrToRGB(out, &m.YCbCr)
	case *image.Gray:
		for y := 0; y < h; y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+w]
			dst := out.Pix[3*y*w : 3*(y+1)*w]
			for x, v := range src {
				dst[3*x], dst[3*x+1], dst[3*x+2] = v, v, v
			}
		}
	case *image.Gray16:
		for y := 0; y < h; y++ {
			src := m.Pix[y*m.Stride : y*m.Stride+2*w]
			dst := out.Pix[3*y*w : 3*(y+1)*w]
			for x := 0; x < w; x++ {
				v := uint8(255)
				if src[2*x] == 0 { // below 256: PIL's "I" -> "RGB" keeps the value
					v = src[2*x+1]
				}
				dst[3*x], dst[3*x+1], dst[3*x+2] = v, v, v
			}
		}
	case *image.NRGBA:
		copyChannels(out, m.Pix, m.Stride, 4, 1)
	case *image.RGBA:
		if m.Opaque() {
			copyChannels(out, m.Pix, m.Stride, 4, 1)
		} else {
			convertGeneric(out, img)
		}
	case *image.NRGBA64:
		copyChannels(out, m.Pix, m.Stride, 8, 2)
	case *image.RGBA64:
		if m.Opaque() {
			copyChannels(out, m.Pix, m.Stride, 8, 2)
		} else {
			convertGeneric(out, img)
		}
	case *image.CMYK:
		cmykToRGB(out, m)
	case *image.Paletted:
		palettedToRGB(out, m)
	default:
		convertGeneric(out, img)
	}
	return out, nil
}

// copyChannels copies the first three channels of a pixel layout of step bytes per pixel;
// for 16-bit layouts (width 2) it keeps the high byte, which comes first (big-endian).
func copyChannels(out *RGB, pix []uint8, stride, step, width int) {
	w := out.W
	for y := 0; y < out.H; y++ {
		src := pix[y*stride : y*stride+step*w]
		dst := out.Pix[3*y*w : 3*(y+1)*w]
		for x := 0; x < w; x++ {
			s := src[step*x:]
			dst[3*x], dst[3*x+1], dst[3*x+2] = s[0], s[width], s[2*width]
		}
	}
}

// cmykToRGB is PIL's cmyk2rgb: nk = 255-k, channel = clip(nk - round(c*nk/255)), with
// PIL's MULDIV255 rounding ((t>>8)+t)>>8 where t = c*nk + 128.
func cmykToRGB(out *RGB, m *image.CMYK) {
	w := out.W
	for y := 0; y < out.H; y++ {
		src := m.Pix[y*m.Stride : y*m.Stride+4*w]
		dst := out.Pix[3*y*w : 3*(y+1)*w]
		for x := 0; x < w; x++ {
			s := src[4*x : 4*x+4]
			nk := 255 - int(s[3])
			for c := 0; c < 3; c++ {
				t := int(s[c])*nk + 128
				dst[3*x+c] = clampByte(nk - (((t >> 8) + t) >> 8))
			}
		}
	}
}

func palettedToRGB(out *RGB, m *image.Paletted) {
	var lut [256][3]uint8
	for i, c := range m.Palette {
		if i >= len(lut) {
			break
		}
		lut[i] = straightRGB(c)
	}
	w := out.W
	for y := 0; y < out.H; y++ {
		src := m.Pix[y*m.Stride : y*m.Stride+w]
		dst := out.Pix[3*y*w : 3*(y+1)*w]
		for x, idx := range src {
			c := lut[idx]
			dst[3*x], dst[3*x+1], dst[3*x+2] = c[0], c[1], c[2]
		}
	}
}

// straightRGB returns a colour's channels without alpha premultiplication.
func straightRGB(c color.Color) [3]uint8 {
	switch v := c.(type) {
	case color.NRGBA:
		return [3]uint8{v.R, v.G, v.B}
	case color.RGBA:
		if v.A == 255 || v.A == 0 {
			return [3]uint8{v.R, v.G, v.B}
		}
	}
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	return [3]uint8{n.R, n.G, n.B}
}

func convertGeneric(out *RGB, img image.Image) {
	b := img.Bounds()
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := straightRGB(img.At(x, y))
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = c[0], c[1], c[2]
			i += 3
		}
	}
}

func clampByte(v int) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}
