package imageproc

import (
	"image"
	"image/color"
	"testing"
)

// TestEncodeJPEG: every kind of image comes back, decoded by this package, at its size
// and close to its colours; an opaque RGBA is read in place (a sub-image included), the
// rest through ToRGB, translucency onto white.
func TestEncodeJPEG(t *testing.T) {
	opaque := image.NewRGBA(image.Rect(0, 0, 40, 30))
	for y := 0; y < 30; y++ {
		for x := 0; x < 40; x++ {
			opaque.SetRGBA(x, y, color.RGBA{uint8(50 + 4*x), uint8(60 + 3*y), 140, 255})
		}
	}
	halfRed := image.NewNRGBA(image.Rect(0, 0, 16, 16)) // red at half opacity: pink on white
	gray := image.NewGray(image.Rect(0, 0, 17, 9))
	for i := range halfRed.Pix {
		halfRed.Pix[i] = [4]uint8{255, 0, 0, 128}[i%4]
	}
	for i := range gray.Pix {
		gray.Pix[i] = 100
	}
	for _, tc := range []struct {
		name string
		img  image.Image
		want func(x, y int) color.RGBA
	}{
		{"opaque RGBA", opaque, func(x, y int) color.RGBA { return opaque.RGBAAt(x, y) }},
		{"sub-image", opaque.SubImage(image.Rect(9, 5, 33, 27)), func(x, y int) color.RGBA { return opaque.RGBAAt(x+9, y+5) }},
		{"translucent", halfRed, func(int, int) color.RGBA { return color.RGBA{255, 127, 127, 255} }},
		{"gray", gray, func(int, int) color.RGBA { return color.RGBA{100, 100, 100, 255} }},
	} {
		data, err := EncodeJPEG(tc.img, JPEGOptions{Quality: 90})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if Sniff(data) != FormatJPEG {
			t.Fatalf("%s: not JPEG bytes", tc.name)
		}
		back, _, err := Decode(data, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b := tc.img.Bounds()
		if back.Bounds() != image.Rect(0, 0, b.Dx(), b.Dy()) {
			t.Fatalf("%s: decoded %v, want %dx%d", tc.name, back.Bounds(), b.Dx(), b.Dy())
		}
		m := back.(*image.RGBA)
		for y := 0; y < b.Dy(); y++ {
			for x := 0; x < b.Dx(); x++ {
				got, want := m.RGBAAt(x, y), tc.want(x, y)
				if d := maxDiff(got, want); d > 6 {
					t.Fatalf("%s: pixel (%d,%d) %v, want about %v", tc.name, x, y, got, want)
				}
			}
		}
	}
	for name, img := range map[string]image.Image{"nil": nil, "empty": image.NewRGBA(image.Rect(3, 3, 3, 9))} {
		if _, err := EncodeJPEG(img, JPEGOptions{Quality: 90}); err == nil {
			t.Errorf("%s image encoded", name)
		}
	}
	if _, err := EncodeJPEG(opaque, JPEGOptions{Quality: 0}); err == nil {
		t.Error("quality 0 accepted")
	}
}

func maxDiff(a, b color.RGBA) int {
	d := 0
	for _, p := range [][2]uint8{{a.R, b.R}, {a.G, b.G}, {a.B, b.B}} {
		d = max(d, int(p[0])-int(p[1]), int(p[1])-int(p[0]))
	}
	return d
}
