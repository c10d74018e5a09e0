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

// ToRGB converts a decoded image the way the upstream processor's to_rgb converts the
// image PIL opens from the same file: an "RGBA" image is pasted onto white with its
// alpha as the mask, any other mode goes through convert("RGB"). Decode returns types
// that carry PIL's mode (see alpha.go), so that:
//
//   - NRGBA and NRGBA64 (PIL "RGBA": PNG RGBA, WebP with alpha), and any other type
//     with alpha, are blended onto white with PIL's arithmetic,
//     channel = (255*(255-a) + c*a) / 255 rounded as PIL's DIV255 does, on the 8-bit
//     straight colour (16-bit samples keep their high byte first, as PIL's "RGBA;16B");
//     an opaque pixel keeps its colour;
//   - palette images take the palette's colour, whatever its alpha (PIL's "P" with
//     transparency is converted, not composited);
//   - gray is replicated to the three channels;
//   - 16-bit gray clips at 255, because PIL opens it as 32-bit mode "I" and "I" -> "RGB"
//     clamps to 0..255 (a 16-bit gray PNG therefore comes out mostly white, as in PIL);
//   - CMYK uses PIL's formula, channel = 255 - k - c*(255-k)/255 rounded as PIL rounds,
//     on CMYK as PIL stores it (Decode has already inverted an Adobe JPEG's);
//   - a JPEG's RGB comes from libjpeg (jpeg.go), a lossy WebP's from libwebp's maths
//     (webp.go); a *image.YCbCr from elsewhere takes Go's own conversion.
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
		// Decoders return images anchored at the origin; anything else (a sub-image)
		// takes the slow, always-correct path.
		convertGeneric(out, img)
		return out, nil
	}
	switch m := img.(type) {
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
	case *image.RGBA:
		blendRows(out, m.Pix, m.Stride, 4, 1, true)
	case *image.NRGBA:
		blendRows(out, m.Pix, m.Stride, 4, 1, false)
	case *image.NRGBA64:
		blendRows(out, m.Pix, m.Stride, 8, 2, false)
	case *image.CMYK:
		cmykToRGB(out, m)
	case *image.Paletted:
		palettedToRGB(out, m)
	default:
		convertGeneric(out, img)
	}
	return out, nil
}

// blendOnWhite is PIL's paste of a colour channel c under alpha a onto white (255):
// BLEND(a, 255, c) = DIV255(255*(255-a) + c*a), DIV255(x) = ((x+128)>>8 + x+128) >> 8.
func blendOnWhite(c, a uint8) uint8 {
	t := 255*(255-uint32(a)) + uint32(c)*uint32(a) + 128
	return uint8(((t >> 8) + t) >> 8)
}

// blendRows converts a four-channel layout of step bytes per pixel whose samples are
// width bytes wide, big-endian (the high byte first, which is all PIL keeps of 16-bit
// samples). Opaque pixels copy; others are blended onto white. premultiplied colours
// (image.RGBA) are first made straight, as Go's NRGBA model does.
func blendRows(out *RGB, pix []uint8, stride, step, width int, premultiplied bool) {
	w := out.W
	for y := 0; y < out.H; y++ {
		src := pix[y*stride : y*stride+step*w]
		dst := out.Pix[3*y*w : 3*(y+1)*w]
		for x := 0; x < w; x++ {
			s := src[step*x : step*x+step]
			r, g, b, a := s[0], s[width], s[2*width], s[3*width]
			d := dst[3*x : 3*x+3 : 3*x+3]
			if a == 0xFF { // blending with 255 would give c back
				d[0], d[1], d[2] = r, g, b
				continue
			}
			if premultiplied {
				c := straightRGB(color.RGBA{r, g, b, a})
				r, g, b = c[0], c[1], c[2]
			}
			d[0], d[1], d[2] = blendOnWhite(r, a), blendOnWhite(g, a), blendOnWhite(b, a)
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

// convertGeneric is ToRGB for any image type, pixel by pixel: palette images take the
// palette's colour; anything else is blended onto white by its alpha (8-bit straight
// colour and alpha, as PIL's "RGBA").
func convertGeneric(out *RGB, img image.Image) {
	b := img.Bounds()
	_, paletted := img.ColorModel().(color.Palette)
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := img.At(x, y)
			rgb := straightRGB(c)
			if _, _, _, a := c.RGBA(); !paletted && a != 0xFFFF {
				a8 := uint8(a >> 8)
				rgb = [3]uint8{blendOnWhite(rgb[0], a8), blendOnWhite(rgb[1], a8), blendOnWhite(rgb[2], a8)}
			}
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = rgb[0], rgb[1], rgb[2]
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
