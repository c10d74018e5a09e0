package imageproc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
)

// A GIF's first frame as PIL 9.4 opens it (GifImagePlugin) and convert("RGB") sees it:
//
//   - the image is the logical screen, grown to hold the first frame if that reaches
//     past it; the frame's pixels sit at its offset, and the rest of the canvas holds the
//     frame's transparent index when it has one, else index 0 (not the background);
//   - the colours are the frame's palette (local, else global) as stored, the transparent
//     entry included: convert("RGB") drops transparency rather than compositing it;
//     entries past the stored table are PIL's default ramp (i, i, i). A table that is
//     exactly that ramp makes PIL open the frame as "L", which comes out the same.
//
// Go's image/gif decodes the frame's indices; this file lays them out PIL's way. It
// replaces Go's palette, whose transparent entry Go sets to transparent black.

// gifLayout is what PIL reads from a GIF before the first frame's pixel data.
type gifLayout struct {
	canvas      image.Point     // PIL's image size
	screen      image.Point     // the logical screen in the file
	frame       image.Rectangle // the first frame on the canvas
	palette     []byte          // RGB triples of the frame's table; nil: none
	transparent int             // the frame's transparent index, -1 when none
}

// parseGIFLayout walks the blocks up to the first image descriptor, the way PIL's
// _open and _seek(0) do.
func parseGIFLayout(data []byte) (gifLayout, error) {
	if len(data) < 13 {
		return gifLayout{}, errors.New("shorter than its header")
	}
	l := gifLayout{transparent: -1}
	l.screen = image.Pt(int(binary.LittleEndian.Uint16(data[6:])), int(binary.LittleEndian.Uint16(data[8:])))
	pos := 13
	var global []byte
	if flags := data[10]; flags&0x80 != 0 {
		n := 3 << (flags&7 + 1)
		if pos+n > len(data) {
			return gifLayout{}, errors.New("global colour table cut short")
		}
		global = data[pos : pos+n]
		pos += n
	}
	for pos < len(data) {
		switch data[pos] {
		case ';':
			return gifLayout{}, errNoFrame
		case '!':
			if pos+1 >= len(data) {
				return gifLayout{}, errors.New("extension cut short")
			}
			label := data[pos+1]
			pos += 2
			first := true
			for pos < len(data) && data[pos] != 0 { // sub-blocks up to the terminator
				n := int(data[pos])
				if pos+1+n > len(data) {
					return gifLayout{}, errors.New("extension block cut short")
				}
				// A graphic control extension sets the transparent index; as in PIL, one
				// without the flag does not clear an earlier one.
				if first && label == 0xF9 && n >= 4 && data[pos+1]&1 != 0 {
					l.transparent = int(data[pos+4])
				}
				first = false
				pos += 1 + n
			}
			pos++
		case ',':
			if pos+10 > len(data) {
				return gifLayout{}, errors.New("image descriptor cut short")
			}
			d := data[pos+1 : pos+10]
			x0, y0 := int(binary.LittleEndian.Uint16(d[0:])), int(binary.LittleEndian.Uint16(d[2:]))
			l.frame = image.Rect(x0, y0, x0+int(binary.LittleEndian.Uint16(d[4:])), y0+int(binary.LittleEndian.Uint16(d[6:])))
			l.canvas = image.Pt(max(l.screen.X, l.frame.Max.X), max(l.screen.Y, l.frame.Max.Y))
			l.palette = global
			if flags := d[8]; flags&0x80 != 0 {
				n := 3 << (flags&7 + 1)
				if pos+10+n > len(data) {
					return gifLayout{}, errors.New("local colour table cut short")
				}
				l.palette = data[pos+10 : pos+10+n]
			}
			return l, nil
		default:
			pos++ // PIL skips bytes it does not know
		}
	}
	return gifLayout{}, errNoFrame
}

func gifConfig(data []byte) (image.Config, error) {
	l, err := parseGIFLayout(data)
	if err != nil {
		return image.Config{}, err
	}
	return image.Config{Width: l.canvas.X, Height: l.canvas.Y}, nil
}

// pilPalette is the 256-entry palette PIL converts the frame with: the stored table,
// then PIL's default ramp.
func (l gifLayout) pilPalette() color.Palette {
	p := make(color.Palette, 256)
	for i := range p {
		v := uint8(i)
		c := color.RGBA{v, v, v, 255}
		if 3*i+2 < len(l.palette) {
			c = color.RGBA{l.palette[3*i], l.palette[3*i+1], l.palette[3*i+2], 255}
		}
		p[i] = c
	}
	return p
}

func decodeGIF(ctx context.Context, data []byte, _ image.Config) (image.Image, error) {
	l, err := parseGIFLayout(data)
	if err != nil {
		return nil, err
	}
	if l.canvas != l.screen {
		// Go refuses a frame reaching past the screen; PIL grows the image instead.
		data = bytes.Clone(data)
		binary.LittleEndian.PutUint16(data[6:], uint16(l.canvas.X))
		binary.LittleEndian.PutUint16(data[8:], uint16(l.canvas.Y))
	}
	img, err := gif.Decode(newCtxReader(ctx, data))
	if err != nil {
		return nil, err
	}
	frame, ok := img.(*image.Paletted)
	if !ok || frame.Rect != l.frame {
		return nil, fmt.Errorf("first frame %v, its descriptor says %v", img.Bounds(), l.frame)
	}
	fill := uint8(0)
	if l.transparent >= 0 {
		fill = uint8(l.transparent)
	}
	out := image.NewPaletted(image.Rect(0, 0, l.canvas.X, l.canvas.Y), l.pilPalette())
	if fill != 0 {
		for i := range out.Pix {
			out.Pix[i] = fill
		}
	}
	w := l.frame.Dx()
	for y := l.frame.Min.Y; y < l.frame.Max.Y; y++ {
		src := frame.Pix[frame.PixOffset(l.frame.Min.X, y):][:w]
		copy(out.Pix[out.PixOffset(l.frame.Min.X, y):], src)
	}
	return out, nil
}
