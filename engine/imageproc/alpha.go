package imageproc

import (
	"bytes"
	"context"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"

	"golang.org/x/image/webp"
)

// Which alpha PIL keeps. The upstream processor's to_rgb composites an image onto white
// only when PIL opens it as mode "RGBA" (ToRGB does that blend); every other mode goes
// through convert("RGB"), which drops transparency. Go's decoders do not say which mode
// PIL would pick (image/png returns NRGBA for gray+alpha, for RGBA, and for RGB or gray
// with a tRNS colour alike), so the decode functions below read it from the file and
// drop, at decode time, the alpha PIL would drop:
//
//	PNG RGBA (8 or 16 bit)        "RGBA"  kept: composited onto white
//	PNG gray+alpha, 16 bit        "RGBA"  kept (PIL unpacks "LA;16B" into RGBA)
//	PNG gray+alpha, 8 bit         "LA"    dropped: gray
//	PNG RGB + tRNS colour         "RGB"   dropped: the stored colour
//	PNG gray + tRNS, 1-8 bit      "L"/"1" dropped: gray
//	PNG gray + tRNS, 16 bit       "I"     dropped: 16-bit gray, which ToRGB clips at 255
//	PNG palette + tRNS            "P"     ToRGB takes the palette colour, ignoring alpha
//	                                      (an index past PLTE: PIL's ramp, (i, i, i))
//	WebP with alpha               "RGBA"  kept (libwebp's has_alpha, below)
//	WebP without                  "RGB"   dropped, whatever the pixels carry

func pngConfig(data []byte) (image.Config, error) { return png.DecodeConfig(bytes.NewReader(data)) }

// PNG colour types (IHDR byte 25).
const (
	pngGray      = 0
	pngRGB       = 2
	pngPalette   = 3
	pngGrayAlpha = 4
	pngRGBA      = 6
)

func decodePNG(ctx context.Context, data []byte, _ image.Config) (image.Image, error) {
	img, err := png.Decode(newCtxReader(ctx, data))
	if err != nil {
		return nil, err
	}
	// DecodeConfig has read the IHDR, the first chunk, so data[25] is its colour type.
	switch data[25] {
	case pngGrayAlpha:
		if data[24] == 16 {
			return img, nil // PIL: mode "RGBA"
		}
		return grayOf(img), nil
	case pngGray:
		return grayOf(img), nil
	case pngRGB:
		return opaque(img), nil
	case pngPalette:
		return pilPaletteTail(img, data), nil
	}
	return img, nil
}

// pilPaletteTail gives the palette entries past the PLTE chunk's the colours PIL gives
// them, its default ramp (i, i, i): image/png makes them opaque black, and a pixel may
// use them.
func pilPaletteTail(img image.Image, data []byte) image.Image {
	m, ok := img.(*image.Paletted)
	if !ok {
		return img
	}
	for pos := 8; pos+8 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[pos:]))
		if string(data[pos+4:pos+8]) == "PLTE" {
			for i := n / 3; i < len(m.Palette); i++ {
				m.Palette[i] = color.RGBA{uint8(i), uint8(i), uint8(i), 0xFF}
			}
			break
		}
		if n < 0 || n > len(data) {
			break
		}
		pos += 12 + n
	}
	return m
}

// grayOf turns Go's decode of 8-bit gray+alpha, or of gray with a tRNS value (NRGBA or,
// at 16 bits, NRGBA64, gray in all three colour channels), into the gray PIL keeps:
// 8-bit, or 16-bit for 16-bit gray (PIL's mode "I", which ToRGB clips). Go's plain gray
// decodes pass through.
func grayOf(img image.Image) image.Image {
	switch m := img.(type) {
	case *image.NRGBA:
		g := image.NewGray(m.Rect)
		for y := 0; y < m.Rect.Dy(); y++ {
			src, dst := m.Pix[y*m.Stride:], g.Pix[y*g.Stride:y*g.Stride+m.Rect.Dx()]
			for x := range dst {
				dst[x] = src[4*x]
			}
		}
		return g
	case *image.NRGBA64:
		g := image.NewGray16(m.Rect)
		for y := 0; y < m.Rect.Dy(); y++ {
			src, dst := m.Pix[y*m.Stride:], g.Pix[y*g.Stride:y*g.Stride+2*m.Rect.Dx()]
			for x := 0; x < len(dst)/2; x++ {
				dst[2*x], dst[2*x+1] = src[8*x], src[8*x+1]
			}
		}
		return g
	}
	return img
}

// opaque sets every alpha sample of an NRGBA or NRGBA64 image to its maximum, in place.
func opaque(img image.Image) image.Image {
	switch m := img.(type) {
	case *image.NRGBA:
		for i := 3; i < len(m.Pix); i += 4 {
			m.Pix[i] = 0xFF
		}
	case *image.NRGBA64:
		for i := 6; i < len(m.Pix); i += 8 {
			m.Pix[i], m.Pix[i+1] = 0xFF, 0xFF
		}
	}
	return img
}

func webpConfig(data []byte) (image.Config, error) { return webp.DecodeConfig(bytes.NewReader(data)) }

func decodeWebPImage(ctx context.Context, data []byte, _ image.Config) (image.Image, error) {
	img, err := webp.Decode(newCtxReader(ctx, data))
	if err != nil {
		return nil, err
	}
	img = webpColours(img)
	if !webpHasAlpha(data) {
		img = opaque(img)
	}
	return img, nil
}

// webpHasAlpha is libwebp's WebPGetFeatures has_alpha, which decides PIL's mode: for a
// lossless bitstream the VP8L header's alpha_is_used bit, otherwise the VP8X chunk's
// alpha flag or an ALPH chunk.
func webpHasAlpha(data []byte) bool {
	alpha := false
chunks:
	for pos := 12; pos+8 <= len(data); {
		tag := string(data[pos : pos+4])
		size := int(binary.LittleEndian.Uint32(data[pos+4:]))
		body := data[pos+8:]
		switch tag {
		case "VP8X":
			alpha = len(body) > 0 && body[0]&0x10 != 0
		case "ALPH":
			alpha = true
		case "VP8L":
			// signature 0x2f, then 14+14 bits of size, then alpha_is_used
			return len(body) >= 5 && body[0] == 0x2f && binary.LittleEndian.Uint32(body[1:])>>28&1 != 0
		case "VP8 ":
			return alpha
		}
		if size < 0 || size > len(data) {
			break chunks
		}
		pos += 8 + size + size&1
	}
	return alpha
}
