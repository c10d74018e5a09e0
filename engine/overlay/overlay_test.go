package overlay

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	xdraw "golang.org/x/image/draw"

	"github.com/locateanything/detect/engine"
)

// scene is a deterministic picture with no palette colours in it: a soft gradient.
func scene(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(60 + x*80/w), uint8(70 + y*80/h), 90, 255})
		}
	}
	return img
}

func rgbaAt(img *image.RGBA, x, y int) color.RGBA { return img.RGBAAt(x, y) }

func TestDrawEmptyListsLeavesImageIdentical(t *testing.T) {
	src := scene(64, 48)
	got := Draw(src, nil, nil)
	if !bytes.Equal(got.Pix, src.Pix) || got.Bounds() != src.Bounds() {
		t.Fatal("drawing nothing changed the image")
	}
	if &got.Pix[0] == &src.Pix[0] {
		t.Fatal("Draw returned the caller's image instead of a copy")
	}
	// A non-RGBA source with an offset origin comes back anchored at (0, 0), same pixels.
	gray := image.NewGray(image.Rect(10, 20, 30, 40))
	gray.Pix[5] = 200
	got = Draw(gray, []engine.Detection{}, []engine.Point{})
	if got.Bounds() != image.Rect(0, 0, 20, 20) || got.RGBAAt(5, 0) != (color.RGBA{200, 200, 200, 255}) {
		t.Fatalf("gray source: bounds %v, pixel %v", got.Bounds(), got.RGBAAt(5, 0))
	}
}

func TestDrawBoxAndTag(t *testing.T) {
	src := scene(400, 300)
	orig := bytes.Clone(src.Pix)
	det := engine.Detection{Label: "dog", Box: [4]float64{100, 120, 250, 260}}
	got := Draw(src, []engine.Detection{det}, nil)
	if !bytes.Equal(src.Pix, orig) {
		t.Fatal("Draw wrote into the caller's image")
	}
	col := LabelColor("dog")
	for _, p := range []image.Point{{100, 190}, {101, 190}, {249, 190}, {175, 259}, {175, 258}} {
		if c := rgbaAt(got, p.X, p.Y); c != col {
			t.Errorf("box edge pixel %v = %v, want the label colour %v", p, c, col)
		}
	}
	// Interior and outside untouched.
	for _, p := range []image.Point{{175, 190}, {103, 190}, {175, 256}, {99, 190}, {251, 190}, {175, 261}} {
		if c, want := rgbaAt(got, p.X, p.Y), rgbaAt(src, p.X, p.Y); c != want {
			t.Errorf("pixel %v = %v, want it untouched (%v)", p, c, want)
		}
	}
	// The tag sits on the box's top-left corner: filled with the label colour, with text
	// pixels of another colour inside it.
	p := layout(got.Bounds(), got.Bounds(), styleFor(got.Bounds()).fontPx, []item{{text: "dog", label: "dog", anchor: image.Rect(100, 120, 250, 260)}}, nil)
	if len(p.tags) != 1 {
		t.Fatalf("%d tags, want 1", len(p.tags))
	}
	r := p.tags[0].rect
	if r.Max.Y != 120 || r.Min.X != 100 || r.Dx() < 10 {
		t.Fatalf("tag at %v, want it above (100,120)", r)
	}
	var fillPx, textPx int
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if rgbaAt(got, x, y) == col {
				fillPx++
			} else {
				textPx++
			}
		}
	}
	if fillPx == 0 || textPx < 10 {
		t.Fatalf("tag %v has %d fill and %d text pixels", r, fillPx, textPx)
	}
}

func TestDrawClipsBoxes(t *testing.T) {
	src := scene(120, 80)
	dets := []engine.Detection{
		{Label: "sky", Box: [4]float64{-50, -40, 60, 30}},       // sticks out top-left
		{Label: "sea", Box: [4]float64{110, 70, 1e12, 1e12}},    // huge
		{Label: "nowhere", Box: [4]float64{500, 500, 600, 600}}, // fully outside
		{Label: "nan", Box: [4]float64{math.NaN(), 0, 10, 10}},  // not drawable
		{Label: "reversed", Box: [4]float64{90, 60, 70, 40}},    // x2 < x1
		{Label: "inf", Box: [4]float64{0, 0, math.Inf(1), 10}},  // not drawable
		{Label: "dot", Box: [4]float64{5.2, 5.2, 5.4, 5.4}},     // rounds to nothing
	}
	got := Draw(src, dets, []engine.Point{{Label: "off", Point: [2]float64{-3, 500}}})
	if c := rgbaAt(got, 30, 0); c != LabelColor("sky") {
		t.Errorf("clipped box: top edge at the image border is %v, want %v", c, LabelColor("sky"))
	}
	if c := rgbaAt(got, 0, 25); c != LabelColor("sky") {
		t.Errorf("clipped box: left edge at the image border is %v, want %v", c, LabelColor("sky"))
	}
	if c := rgbaAt(got, 119, 79); c != LabelColor("sea") {
		t.Errorf("huge box: corner %v, want %v", c, LabelColor("sea"))
	}
	if c := rgbaAt(got, 70, 50); c != LabelColor("reversed") {
		t.Errorf("reversed box: left edge %v, want %v", c, LabelColor("reversed"))
	}
	if c := rgbaAt(got, 80, 50); c != rgbaAt(src, 80, 50) {
		t.Errorf("reversed box: interior %v changed", c)
	}
}

func TestDrawPoints(t *testing.T) {
	src := scene(200, 150)
	got := Draw(src, nil, []engine.Point{{Label: "nose", Point: [2]float64{60.7, 80.2}}})
	if c := rgbaAt(got, 60, 80); c != LabelColor("nose") {
		t.Errorf("marker centre %v, want %v", c, LabelColor("nose"))
	}
	if c := rgbaAt(got, 150, 20); c != rgbaAt(src, 150, 20) {
		t.Errorf("far pixel changed to %v", c)
	}
}

func TestLabelColors(t *testing.T) {
	if LabelColor("car") != LabelColor("car") {
		t.Fatal("one label, two colours")
	}
	seen := map[color.RGBA]bool{}
	for _, l := range []string{"car", "person", "dog", "bus", "kite", "horse", "giraffe", "truck"} {
		seen[LabelColor(l)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("8 labels share %d colours", len(seen))
	}
	long := string(bytes.Repeat([]byte("x"), 500))
	if r := []rune(shorten(long)); len(r) != maxLabelRunes || r[len(r)-1] != '…' {
		t.Fatalf("long label shortened to %d runes", len(r))
	}
	if s := shorten("a\xffb"); s != "a\uFFFDb" {
		t.Fatalf("invalid UTF-8 became %q", s)
	}
}

func TestEncodePNGRoundTrip(t *testing.T) {
	enc := NewEncoder()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			img := Draw(scene(90+i, 70), []engine.Detection{{Label: "x", Box: [4]float64{5, 5, 50, 40}}}, nil)
			data, err := enc.EncodePNG(img)
			if err != nil {
				errs <- err
				return
			}
			back, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				errs <- err
				return
			}
			for y := 0; y < 70; y++ {
				for x := 0; x < 90+i; x++ {
					if color.RGBAModel.Convert(back.At(x, y)) != img.RGBAAt(x, y) {
						errs <- fmt.Errorf("image %d: pixel (%d,%d) changed in the round trip", i, x, y)
						return
					}
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := enc.EncodePNG(image.NewRGBA(image.Rect(0, 0, 0, 0))); err == nil {
		t.Error("empty image encoded without error")
	}
	if _, err := enc.EncodePNG(Draw(nil, nil, nil)); err == nil {
		t.Error("Draw(nil) encoded without error")
	}
}

// TestEncodePNGOtherImages covers the fallback (transparency, other layouts) and a
// sub-image on the fast path: every one must decode back to the same colours.
func TestEncodePNGOtherImages(t *testing.T) {
	translucent := image.NewNRGBA(image.Rect(0, 0, 7, 5))
	for i := range translucent.Pix {
		translucent.Pix[i] = uint8(i * 13)
	}
	gray := image.NewGray(image.Rect(0, 0, 9, 4))
	for i := range gray.Pix {
		gray.Pix[i] = uint8(i * 29)
	}
	opaque := scene(40, 30)
	sub := opaque.SubImage(image.Rect(5, 7, 33, 21))
	enc := NewEncoder()
	for name, img := range map[string]image.Image{"translucent": translucent, "gray": gray, "sub-image": sub, "whole": opaque} {
		data, err := enc.EncodePNG(img)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		b := img.Bounds()
		if back.Bounds().Dx() != b.Dx() || back.Bounds().Dy() != b.Dy() {
			t.Fatalf("%s: size %v, want %v", name, back.Bounds(), b)
		}
		for y := 0; y < b.Dy(); y++ {
			for x := 0; x < b.Dx(); x++ {
				got := color.NRGBA64Model.Convert(back.At(x, y))
				want := color.NRGBA64Model.Convert(img.At(b.Min.X+x, b.Min.Y+y))
				if got != want {
					t.Fatalf("%s: pixel (%d,%d) = %v, want %v", name, x, y, got, want)
				}
			}
		}
	}
}

// photo1080p is the dog photograph scaled up to 1920x1080, for realistic PNG content.
func photo1080p(b *testing.B) *image.RGBA {
	f, err := os.Open(filepath.Join("testdata", "dog.jpg"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	src, err := jpeg.Decode(f)
	if err != nil {
		b.Fatal(err)
	}
	dst := image.NewRGBA(image.Rect(0, 0, 1920, 1080))
	xdraw.BiLinear.Scale(dst, dst.Bounds(), src, src.Bounds(), xdraw.Src, nil)
	return dst
}

// BenchmarkDrawEncode1080p: ten labelled boxes on a 1920x1080 photo, then PNG.
func BenchmarkDrawEncode1080p(b *testing.B) {
	img := photo1080p(b)
	dets := tenBoxes()
	enc := NewEncoder()
	b.ReportAllocs()
	cpu0 := processCPU()
	var size int
	for b.Loop() {
		data, err := enc.EncodePNG(Draw(img, dets, nil))
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(size)/1e6, "MB/png")
}

// BenchmarkDraw1080p is the drawing alone.
func BenchmarkDraw1080p(b *testing.B) {
	img := photo1080p(b)
	dets := []engine.Detection{{Label: "dog", Box: [4]float64{100, 100, 900, 700}}}
	b.ReportAllocs()
	for b.Loop() {
		Draw(img, dets, nil)
	}
}
