package testimage

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
)

// The repeated stretch and the patched checksum make a PNG Go's strict decoder (which
// checks the Adler-32) reads back as the uniform image it claims to be, at every size
// around the stretch boundaries.
func TestUniformPNGDecodes(t *testing.T) {
	for _, c := range []struct {
		w, h int
		deep bool
	}{{1, 1, false}, {7, 3, true}, {100, 200, false}, {300, 700, true}, {1000, 333, true}} {
		data := UniformPNG(c.w, c.h, c.deep)
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if b := img.Bounds(); b.Dx() != c.w || b.Dy() != c.h {
			t.Fatalf("%+v: decoded to %v", c, b)
		}
		want := color.NRGBA64Model.Convert(color.NRGBA64{0x8080, 0x8080, 0x8080, 0x8080})
		if !c.deep {
			want = color.NRGBA64Model.Convert(color.RGBA{0x80, 0x80, 0x80, 0xFF})
		}
		for _, p := range []image.Point{{0, 0}, {c.w - 1, c.h - 1}, {c.w / 2, c.h / 2}} {
			if got := color.NRGBA64Model.Convert(img.At(p.X, p.Y)); got != want {
				t.Fatalf("%+v: pixel %v is %v, want %v", c, p, got, want)
			}
		}
	}
}
