package libjpeg

import (
	"errors"
	"strings"
	"testing"
)

// testPicture is a w x h picture of bpp bytes per pixel in rows of stride bytes: soft
// gradients with a saturated red bar across the middle, the fourth byte (when there is
// one) set to junk that the encoder must ignore.
func testPicture(w, h, bpp, stride int) []byte {
	pix := make([]byte, stride*h)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			p := pix[y*stride+bpp*x:]
			p[0], p[1], p[2] = byte(40+x*150/w), byte(60+y*120/h), byte(120+(x+y)%40)
			if y >= h/2-4 && y < h/2+4 {
				p[0], p[1], p[2] = 230, 25, 75
			}
			if bpp == 4 {
				p[3] = byte(x * 7)
			}
		}
	}
	return pix
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name          string
		w, h, bpp, st int
		o             EncodeOptions
	}{
		{"rgb-444", 97, 61, 3, 3 * 97, EncodeOptions{Quality: 90}},
		{"rgbx-444-padded-rows", 97, 61, 4, 4*97 + 12, EncodeOptions{Quality: 90}},
		{"rgb-420", 64, 48, 3, 3 * 64, EncodeOptions{Quality: 90, Subsampling: Chroma420}},
		{"rgbx-optimized", 50, 33, 4, 4 * 50, EncodeOptions{Quality: 90, Optimize: true}},
		{"rgb-progressive", 50, 33, 3, 3 * 50, EncodeOptions{Quality: 90, Progressive: true}},
		{"one-pixel", 1, 1, 3, 3, EncodeOptions{Quality: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pix := testPicture(tc.w, tc.h, tc.bpp, tc.st)
			data, err := Encode(pix, tc.st, tc.w, tc.h, tc.bpp, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) < 4 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF ||
				data[len(data)-2] != 0xFF || data[len(data)-1] != 0xD9 {
				t.Fatalf("not a JPEG from SOI to EOI: % x ... % x", data[:min(4, len(data))], data[max(0, len(data)-2):])
			}
			h, err := ReadHeader(data)
			if err != nil {
				t.Fatal(err)
			}
			if h.Width != tc.w || h.Height != tc.h || h.Components != 3 || h.ColorSpace != YCbCr || h.Progressive != tc.o.Progressive {
				t.Fatalf("header %+v, want %dx%d YCbCr, progressive %v", h, tc.w, tc.h, tc.o.Progressive)
			}
			out := make([]byte, 4*tc.w*tc.h)
			if err := Decode(data, h, out, 4*tc.w); err != nil {
				t.Fatal(err)
			}
			var sum, worst int
			for y := 0; y < tc.h; y++ {
				for x := 0; x < tc.w; x++ {
					for c := 0; c < 3; c++ {
						d := int(out[4*(y*tc.w+x)+c]) - int(pix[y*tc.st+tc.bpp*x+c])
						d = max(d, -d)
						sum += d
						worst = max(worst, d)
					}
				}
			}
			mean := float64(sum) / float64(3*tc.w*tc.h)
			// Quality 90 on gradients is about a level off on average; the red bar's edges
			// ring (30 levels at worst with full chroma). With 4:2:0 the bar's colour spreads
			// over the chroma of the rows next to it: about three times the mean error.
			maxMean, maxWorst := 2.0, 40
			if tc.o.Subsampling == Chroma420 {
				maxMean, maxWorst = 4.5, 70
			}
			if mean > maxMean || worst > maxWorst {
				t.Errorf("mean error %.2f, worst %d levels; want at most %.1f and %d", mean, worst, maxMean, maxWorst)
			}
		})
	}
}

// TestEncodeChromaSampling checks the sampling factors written in the SOF0 segment:
// 4:4:4 is 1x1 for every component, 4:2:0 is 2x2 for luma.
func TestEncodeChromaSampling(t *testing.T) {
	pix := testPicture(32, 32, 3, 96)
	for s, want := range map[Subsampling]byte{Chroma444: 0x11, Chroma420: 0x22} {
		data, err := Encode(pix, 96, 32, 32, 3, EncodeOptions{Quality: 90, Subsampling: s})
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(string(data), "\xFF\xC0")
		if i < 0 || i+19 > len(data) {
			t.Fatalf("%v: no SOF0 segment", s)
		}
		// FF C0, length (2), precision, height (2), width (2), components, then per
		// component id, sampling factors, table.
		if got := data[i+11]; got != want || data[i+14] != 0x11 || data[i+17] != 0x11 {
			t.Errorf("%v: luma sampling %#x (chroma %#x %#x), want %#x", s, got, data[i+14], data[i+17], want)
		}
	}
}

// TestEncodeErrors: bad arguments are refused before libjpeg sees them; what libjpeg
// itself refuses comes back through error_exit's longjmp as an *Error with its message
// code and template, and the process goes on.
func TestEncodeErrors(t *testing.T) {
	pix := testPicture(8, 8, 3, 24)
	for name, call := range map[string]func() error{
		"2 bytes per pixel": func() error { _, err := Encode(pix, 24, 8, 8, 2, EncodeOptions{Quality: 90}); return err },
		"quality 0":         func() error { _, err := Encode(pix, 24, 8, 8, 3, EncodeOptions{Quality: 0}); return err },
		"quality 101":       func() error { _, err := Encode(pix, 24, 8, 8, 3, EncodeOptions{Quality: 101}); return err },
		"short buffer":      func() error { _, err := Encode(pix[:len(pix)-1], 24, 8, 8, 3, EncodeOptions{Quality: 90}); return err },
		"short stride":      func() error { _, err := Encode(pix, 23, 8, 8, 3, EncodeOptions{Quality: 90}); return err },
		"no pixels":         func() error { _, err := Encode(pix, 24, 0, 8, 3, EncodeOptions{Quality: 90}); return err },
		"subsampling 7": func() error {
			_, err := Encode(pix, 24, 8, 8, 3, EncodeOptions{Quality: 90, Subsampling: 7})
			return err
		},
	} {
		var e *Error
		if err := call(); !errors.As(err, &e) || e.Code != 0 {
			t.Errorf("%s: %v, want the wrapper's *Error", name, err)
		}
	}

	// One row wider than JPEG_MAX_DIMENSION (65500): libjpeg's JERR_IMAGE_TOO_BIG, raised
	// inside jpeg_start_compress. Several times over, to leave the longjmp path well
	// trodden (the race detector and a leak would show up here).
	const w = 65501
	wide := make([]byte, 3*w)
	for i := 0; i < 3; i++ {
		_, err := Encode(wide, 3*w, w, 1, 3, EncodeOptions{Quality: 90})
		var e *Error
		if !errors.As(err, &e) || e.Code == 0 || errors.Is(err, ErrTruncated) {
			t.Fatalf("%d-px row: %v, want libjpeg's error", w, err)
		}
		if !strings.Contains(e.Msg, "#") || strings.Contains(e.Msg, "65500") || strings.Contains(e.Msg, "%") {
			t.Errorf("message %q: want libjpeg's template with its value blanked", e.Msg)
		}
	}
	// The encoder still works afterwards.
	if _, err := Encode(pix, 24, 8, 8, 3, EncodeOptions{Quality: 90}); err != nil {
		t.Fatal(err)
	}
}
