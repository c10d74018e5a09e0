package overlay

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/imageproc"
)

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		f          Format
		valid      bool
		ext, ctype string
	}{
		{PNG, true, ".png", "image/png"},
		{JPEG, true, ".jpg", "image/jpeg"},
		{"jpg", false, "", ""},
		{"PNG", false, "", ""},
		{"", false, "", ""},
	} {
		if tc.f.Valid() != tc.valid {
			t.Errorf("%q: valid %v, want %v", tc.f, tc.f.Valid(), tc.valid)
		}
		if tc.valid && (tc.f.Ext() != tc.ext || tc.f.ContentType() != tc.ctype) {
			t.Errorf("%q: %s %s, want %s %s", tc.f, tc.f.Ext(), tc.f.ContentType(), tc.ext, tc.ctype)
		}
	}
	enc := NewEncoder()
	img := Draw(scene(30, 20), nil, nil)
	if _, err := enc.Encode(img, "gif"); err == nil {
		t.Error("an unknown format encoded")
	}
	viaFormat, err := enc.Encode(img, PNG)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := enc.EncodePNG(img)
	if err != nil || !bytes.Equal(viaFormat, direct) {
		t.Errorf("Encode(PNG) differs from EncodePNG (%v)", err)
	}
	if data, err := enc.Encode(img, JPEG); err != nil || !bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}) {
		t.Errorf("Encode(JPEG): %v, % x", err, data[:min(3, len(data))])
	}
}

// TestEncodeJPEGOverlay: a drawn overlay comes back from Go's own JPEG decoder at its size,
// the photo close to the original and the box line in its label's colour, because chroma
// is kept at full resolution (SOF0: every component sampled 1x1).
func TestEncodeJPEGOverlay(t *testing.T) {
	src := scene(400, 300)
	det := engine.Detection{Label: "bicycle", Box: [4]float64{100, 120, 250, 260}}
	ov := Draw(src, []engine.Detection{det}, nil)
	enc := NewEncoder()
	data, err := enc.EncodeJPEG(ov)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte{0xFF, 0xC0})
	if i < 0 || i+18 > len(data) || data[i+9] != 3 || data[i+11] != 0x11 || data[i+14] != 0x11 || data[i+17] != 0x11 {
		t.Fatalf("no baseline SOF0 with 4:4:4 sampling in the overlay JPEG")
	}
	back, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if back.Bounds() != ov.Bounds() {
		t.Fatalf("decoded %v, want %v", back.Bounds(), ov.Bounds())
	}
	near := func(x, y int, want color.RGBA, tol int) {
		t.Helper()
		got := color.RGBAModel.Convert(back.At(x, y)).(color.RGBA)
		for _, p := range [][2]uint8{{got.R, want.R}, {got.G, want.G}, {got.B, want.B}} {
			if d := int(p[0]) - int(p[1]); d > tol || d < -tol {
				t.Errorf("pixel (%d,%d) %v, want %v within %d", x, y, got, want, tol)
				return
			}
		}
	}
	near(10, 10, src.RGBAAt(10, 10), 4)       // the photo, away from everything drawn
	near(175, 120, LabelColor("bicycle"), 16) // the box's top line, 2 px wide at this size
	near(100, 200, LabelColor("bicycle"), 16) // its left line

	if _, err := enc.EncodeJPEG(Draw(nil, nil, nil)); err == nil {
		t.Error("Draw(nil) encoded as JPEG")
	}
}

// BenchmarkOverlayFormats: the same 1080p overlay (ten labelled boxes) encoded as PNG
// (the fast path) and as JPEG (libjpeg-turbo, quality 90, 4:4:4), on a real 1920x1080
// photograph and on the dog photograph scaled up (smoother, as in BenchmarkDrawEncode1080p).
// The drawing, the same for both, is left out. docs/images.md has the figures.
func BenchmarkOverlayFormats(b *testing.B) {
	photos := []struct {
		name string
		img  func(b *testing.B) *image.RGBA
	}{{"photo=1080p", photoBench1080p}, {"photo=dog-scaled", photo1080p}}
	for _, p := range photos {
		ov := Draw(p.img(b), tenBoxes(), nil)
		for _, f := range Formats {
			b.Run(p.name+"/format="+string(f), func(b *testing.B) {
				enc := NewEncoder()
				cpu0 := processCPU()
				var size int
				for b.Loop() {
					data, err := enc.Encode(ov, f)
					if err != nil {
						b.Fatal(err)
					}
					size = len(data)
				}
				b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
				b.ReportMetric(float64(size)/1e6, "MB")
			})
		}
	}
}

// photoBench1080p is imageproc's 1080p benchmark input (kite.jpg of testdata/images
// resized to 1920x1080 by PIL, JPEG at quality 90), decoded by imageproc.
func photoBench1080p(b *testing.B) *image.RGBA {
	data, err := os.ReadFile(filepath.Join("..", "imageproc", "testdata", "bench_1920x1080.jpg"))
	if err != nil {
		b.Fatal(err)
	}
	img, _, err := imageproc.Decode(data, 0)
	if err != nil {
		b.Fatal(err)
	}
	return img.(*image.RGBA)
}

// tenBoxes are the boxes of BenchmarkDrawEncode1080p.
func tenBoxes() []engine.Detection {
	labels := []string{"dog", "bicycle", "truck", "person", "car"}
	var dets []engine.Detection
	for i := 0; i < 10; i++ {
		x, y := float64(60+i*170), float64(80+i*80)
		dets = append(dets, engine.Detection{Label: labels[i%len(labels)], Box: [4]float64{x, y, x + 300, y + 200}})
	}
	return dets
}

// BenchmarkJPEGSettings: the choices behind jpegOptions, on the 1080p overlay of
// BenchmarkOverlayFormats: quality, chroma subsampling, optimised Huffman tables and
// progressive coding, each with its size, encode time and error after decoding, on the
// pixels Draw changed (lines, tags, text) and on the rest (the photo).
func BenchmarkJPEGSettings(b *testing.B) {
	src := photoBench1080p(b)
	ov := Draw(src, tenBoxes(), nil)
	for _, s := range []struct {
		name string
		o    imageproc.JPEGOptions
	}{
		{"q=85/444", imageproc.JPEGOptions{Quality: 85}},
		{"q=90/444", imageproc.JPEGOptions{Quality: 90}},
		{"q=95/444", imageproc.JPEGOptions{Quality: 95}},
		{"q=85/420", imageproc.JPEGOptions{Quality: 85, Subsample420: true}},
		{"q=90/420", imageproc.JPEGOptions{Quality: 90, Subsample420: true}},
		{"q=95/420", imageproc.JPEGOptions{Quality: 95, Subsample420: true}},
		{"q=90/444/optimize", imageproc.JPEGOptions{Quality: 90, Optimize: true}},
		{"q=90/444/progressive", imageproc.JPEGOptions{Quality: 90, Progressive: true}},
	} {
		b.Run(s.name, func(b *testing.B) {
			var data []byte
			cpu0 := processCPU()
			for b.Loop() {
				var err error
				if data, err = imageproc.EncodeJPEG(ov, s.o); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(len(data))/1e6, "MB")
			back, _, err := imageproc.Decode(data, 0)
			if err != nil {
				b.Fatal(err)
			}
			drawnMean, drawnP99, photoMean := jpegError(src, ov, back.(*image.RGBA))
			b.ReportMetric(drawnMean, "drawn-err")
			b.ReportMetric(float64(drawnP99), "drawn-err-p99")
			b.ReportMetric(photoMean, "photo-err")
		})
	}
}

// jpegError compares the decoded JPEG back with the overlay ov drawn on src: the mean
// absolute error per channel, in levels, over the pixels Draw changed and its 99th
// percentile (of the per-pixel mean over R, G, B), and the mean over the other pixels.
func jpegError(src, ov, back *image.RGBA) (drawnMean float64, drawnP99 int, photoMean float64) {
	var hist [256]int
	var drawnSum, photoSum, drawnN, photoN int
	for i := 0; i+3 < len(ov.Pix); i += 4 {
		e := 0
		for c := 0; c < 3; c++ {
			e += max(int(ov.Pix[i+c])-int(back.Pix[i+c]), int(back.Pix[i+c])-int(ov.Pix[i+c]))
		}
		if src.Pix[i] != ov.Pix[i] || src.Pix[i+1] != ov.Pix[i+1] || src.Pix[i+2] != ov.Pix[i+2] {
			drawnSum += e
			drawnN++
			hist[e/3]++
		} else {
			photoSum += e
			photoN++
		}
	}
	for n := 0; drawnP99 < 255; drawnP99++ {
		if n += hist[drawnP99]; n >= drawnN*99/100 {
			break
		}
	}
	return float64(drawnSum) / float64(3*max(drawnN, 1)), drawnP99, float64(photoSum) / float64(3*max(photoN, 1))
}
