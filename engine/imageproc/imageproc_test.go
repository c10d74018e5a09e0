package imageproc

import (
	"bytes"
	"encoding/binary"

	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

// pngHeaderOnly is a PNG whose IHDR claims w x h and which then ends: what a
// decompression bomb looks like to DecodeConfig.
func pngHeaderOnly(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2 // 8-bit truecolor
	chunk := append([]byte("IHDR"), ihdr...)
	binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

func encoded(t *testing.T, format string) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	var b bytes.Buffer
	var err error
	switch format {
	case FormatPNG:
		err = png.Encode(&b, img)
	case FormatJPEG:
		err = jpeg.Encode(&b, img, nil)
	case FormatGIF:
		err = gif.Encode(&b, img, nil)
	case FormatWebP:
		return mustRead(t, "lossless.webp")
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func wantInputError(t *testing.T, err error, code string, mentions ...string) {
	t.Helper()
	ie, ok := engine.AsInputError(err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *engine.InputError", err, err)
	}
	if ie.Code != code {
		t.Fatalf("code %q, want %q (%v)", ie.Code, code, err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func TestDecodeRefusesBombBeforeDecoding(t *testing.T) {
	_, format, err := Decode(pngHeaderOnly(100000, 100000), 0)
	wantInputError(t, err, engine.CodeImageTooLarge, "png", "100000x100000")
	if format != FormatPNG {
		t.Errorf("format %q, want png", format)
	}
	// The same header under the budget gets as far as the (missing) pixel data.
	_, _, err = Decode(pngHeaderOnly(10, 10), 0)
	wantInputError(t, err, engine.CodeBadImage, "png")
	// An explicit small budget applies too.
	_, _, err = Decode(encoded(t, FormatPNG), 40*30-1)
	wantInputError(t, err, engine.CodeImageTooLarge, "40x30")
	if _, _, err := Decode(encoded(t, FormatPNG), 40*30); err != nil {
		t.Fatalf("exactly at the budget: %v", err)
	}
}

func TestOptionsDecodeRefusesUnusableGridFromHeader(t *testing.T) {
	o := DefaultOptions()
	// 14x8000 is 112000 pixels, well within the budget, but stretches to a 572-patch side.
	_, format, err := o.Decode(pngHeaderOnly(14, 8000))
	wantInputError(t, err, engine.CodeImageTooLarge, "14x8000", "572")
	if format != FormatPNG {
		t.Errorf("format %q", format)
	}
	_, _, err = o.Decode(pngHeaderOnly(100000, 100000))
	wantInputError(t, err, engine.CodeImageTooLarge, "100000x100000")
	img, _, err := o.Decode(encoded(t, FormatPNG))
	if err != nil || img.Bounds().Dx() != 40 {
		t.Fatalf("a usable image: %v", err)
	}
	bad := o
	bad.InTokenLimit = 0
	if _, _, err := bad.Decode(encoded(t, FormatPNG)); err == nil {
		t.Fatal("decoded with invalid options")
	} else if _, ok := engine.AsInputError(err); ok {
		t.Fatalf("bad options reported as the request's fault: %v", err)
	}
}

func TestDecodeBadBytes(t *testing.T) {
	_, _, err := Decode(nil, 0)
	wantInputError(t, err, engine.CodeBadImage, "0 bytes")
	_, _, err = Decode([]byte("hello, this is not an image"), 0)
	wantInputError(t, err, engine.CodeBadImage, "unrecognised")
	for _, f := range []string{FormatJPEG, FormatPNG, FormatGIF, FormatWebP} {
		data := encoded(t, f)
		img, got, err := Decode(data, 0)
		if err != nil || got != f || img.Bounds().Dx() != 40 && f != FormatWebP {
			t.Fatalf("%s: decode whole file: format %q, err %v", f, got, err)
		}
		for _, cut := range []int{len(data) / 2, len(data) - 8, 20} {
			_, got, err := Decode(data[:cut], 0)
			if got != f {
				t.Errorf("%s cut at %d: format %q", f, cut, got)
			}
			wantInputError(t, err, engine.CodeBadImage, f)
		}
	}
}

func TestToRGBConversions(t *testing.T) {
	// Premultiplied RGBA with partial alpha is made straight (255, 127, 0), as PIL stores
	// it, then pasted onto white: PIL gives (255, 191, 127).
	rgba := image.NewRGBA(image.Rect(0, 0, 1, 1))
	rgba.SetRGBA(0, 0, color.RGBA{128, 64, 0, 128}) // premultiplied
	// Gray16 above 255 clips (PIL mode "I"), below 256 keeps its value.
	g16 := image.NewGray16(image.Rect(0, 0, 2, 1))
	g16.SetGray16(0, 0, color.Gray16{Y: 1000})
	g16.SetGray16(1, 0, color.Gray16{Y: 77})
	cmyk := image.NewCMYK(image.Rect(0, 0, 1, 1))
	cmyk.SetCMYK(0, 0, color.CMYK{C: 255, M: 0, Y: 128, K: 64})
	sub := image.NewNRGBA(image.Rect(0, 0, 4, 4))
	sub.SetNRGBA(2, 3, color.NRGBA{1, 2, 3, 0})
	sub.SetNRGBA(0, 0, color.NRGBA{9, 8, 7, 255})
	pal := image.NewPaletted(image.Rect(0, 0, 2, 1), color.Palette{color.NRGBA{10, 20, 30, 0}, color.NRGBA{40, 50, 60, 128}})
	pal.Pix[1] = 1
	cases := []struct {
		name string
		img  image.Image
		want []uint8
	}{
		{"rgba partial alpha", rgba, []uint8{255, 191, 127}},
		{"gray16", g16, []uint8{255, 255, 255, 77, 77, 77}},
		// PIL: nk=191; c=255 -> 0; m=0 -> 191; y=128 -> 191-96 = 95.
		{"cmyk", cmyk, []uint8{0, 191, 95}},
		{"sub-image, transparent: white", sub.SubImage(image.Rect(2, 3, 3, 4)), []uint8{255, 255, 255}},
		{"sub-image, opaque: its colour", sub.SubImage(image.Rect(0, 0, 1, 1)), []uint8{9, 8, 7}},
		{"palette ignores alpha", pal, []uint8{10, 20, 30, 40, 50, 60}},
	}
	for _, c := range cases {
		got, err := ToRGB(c.img)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got.Pix, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got.Pix, c.want)
		}
	}
	if _, err := ToRGB(image.NewRGBA(image.Rect(0, 0, 0, 5))); err == nil {
		t.Error("an empty image converted without error")
	}
	if _, err := ToRGB(nil); err == nil {
		t.Error("a nil image converted without error")
	}
	if _, err := Preprocess(nil, DefaultOptions()); err == nil {
		t.Error("a nil image preprocessed without error")
	}
	if _, err := Patchify(NewRGB(15, 14), DefaultOptions()); err == nil {
		t.Error("patchify accepted a width that is not a multiple of 14")
	}
}

func TestNativeSize(t *testing.T) {
	o := DefaultOptions()
	cases := []struct{ w, h, limit, tw, th int }{
		{1920, 1080, 1024, 616, 336}, // the reference's worked example
		{1, 1, 1024, 28, 28},
		{2000, 30, 1024, 2016, 56},
		{768, 576, 25600, 784, 588},
	}
	for _, c := range cases {
		o.InTokenLimit = c.limit
		tw, th, err := o.NativeSize(c.w, c.h)
		if err != nil || tw != c.tw || th != c.th {
			t.Errorf("%dx%d @%d: %dx%d (%v), want %dx%d", c.w, c.h, c.limit, tw, th, err, c.tw, c.th)
		}
	}
	o.InTokenLimit = 1024
	// 14x8000 has 571 patches (under the limit): stretched to 28x8008, a 572-patch side.
	_, _, err := o.NativeSize(14, 8000)
	wantInputError(t, err, engine.CodeImageTooLarge, "14x8000", "572")
}

func TestPreprocessLayout(t *testing.T) {
	// A 28x28 image whose pixel value encodes its position; native grid 2x2.
	img := image.NewGray(image.Rect(0, 0, 28, 28))
	for y := 0; y < 28; y++ {
		for x := 0; x < 28; x++ {
			img.SetGray(x, y, color.Gray{uint8(y*4 + x/14)})
		}
	}
	o := DefaultOptions()
	o.CanonGrid = [2]int{}
	res, err := Preprocess(img, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.GridH != 2 || res.GridW != 2 || len(res.Patches) != 4*3*14*14 {
		t.Fatalf("grid %dx%d with %d values", res.GridH, res.GridW, len(res.Patches))
	}
	// Patch (1, 0), channel 2, row 5, column 3 comes from pixel (3, 19).
	p := 1*2 + 0
	got := res.Patches[((p*3+2)*14+5)*14+3]
	want := (float32(19*4)/255 - 0.5) / 0.5
	if got != want {
		t.Fatalf("patch value %v, want %v", got, want)
	}
	// With a canonical grid every image comes out at its size.
	o.CanonGrid = [2]int{2, 4}
	res, err = Preprocess(img, o)
	if err != nil || res.GridH != 2 || res.GridW != 4 || res.Width != 56 || res.Height != 28 {
		t.Fatalf("canonical: %+v %v", res, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Options){
		func(o *Options) { o.InTokenLimit = 0 },
		func(o *Options) { o.Std[1] = 0 },
		func(o *Options) { o.CanonGrid = [2]int{23, 44} },
		func(o *Options) { o.CanonGrid = [2]int{24, 512} },
		func(o *Options) { o.PatchSize = 0 },
	}
	for i, f := range bad {
		o := DefaultOptions()
		f(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("case %d: %+v validated", i, o)
		}
		if _, err := ModelViewRGB(NewRGB(4, 4), o); err == nil {
			t.Errorf("case %d: ModelViewRGB accepted bad options", i)
		}
	}
}

func TestCanonGridParsing(t *testing.T) {
	o := DefaultOptions()
	good := []struct {
		grid, aspect string
		want         [2]int
	}{
		{"", "", [2]int{24, 44}},
		{"", "1920x1080", [2]int{24, 44}},
		{"native", "", [2]int{0, 0}},
		{"NATIVE", "garbage", [2]int{0, 0}},
		{"24x44", "", [2]int{24, 44}},
		{" 12X16 ", "", [2]int{12, 16}},
		{"", "1080x1920", [2]int{44, 24}},
	}
	for _, c := range good {
		got, err := ResolveCanonGrid(c.grid, c.aspect, o)
		if err != nil || got != c.want {
			t.Errorf("grid %q aspect %q: %v (%v), want %v", c.grid, c.aspect, got, err, c.want)
		}
	}
	bad := []struct{ grid, aspect, mentions string }{
		{"24x4a", "", `width "4a"`},
		{"24", "", "no 'x'"},
		{"23x44", "", "height 23"},
		{"24x600", "", "width 600"},
		{"0x44", "", `height "0"`},
		{"", "1920x", `height ""`},
		{"", "-5x10", `width "-5"`},
		{"", "14x8000", "canonical aspect 14x8000"},
	}
	for _, c := range bad {
		_, err := ResolveCanonGrid(c.grid, c.aspect, o)
		if err == nil || !strings.Contains(err.Error(), c.mentions) {
			t.Errorf("grid %q aspect %q: error %v, want one mentioning %q", c.grid, c.aspect, err, c.mentions)
		}
	}
}

func TestResizeBicubicArguments(t *testing.T) {
	if _, err := ResizeBicubic(NewRGB(3, 3), 0, 5); err == nil {
		t.Error("zero width accepted")
	}
	if _, err := ResizeBicubic(&RGB{W: 2, H: 2}, 4, 4); err == nil {
		t.Error("malformed source accepted")
	}
	src := NewRGB(3, 2)
	for i := range src.Pix {
		src.Pix[i] = uint8(i)
	}
	same, err := ResizeBicubic(src, 3, 2)
	if err != nil || !bytes.Equal(same.Pix, src.Pix) || &same.Pix[0] == &src.Pix[0] {
		t.Errorf("same-size resize should be an independent copy: %v", err)
	}
	// A flat image stays flat under any resize (weights sum to one after rounding).
	flat := NewRGB(17, 9)
	for i := range flat.Pix {
		flat.Pix[i] = 173
	}
	for _, sz := range [][2]int{{5, 3}, {40, 31}, {1, 1}, {17, 100}} {
		out, err := ResizeBicubic(flat, sz[0], sz[1])
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range out.Pix {
			if v != 173 {
				t.Fatalf("%v: sample %d = %d, want 173", sz, i, v)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, name := range []string{"tiny_1x1.png", "palette.gif", "lossless.webp", "lossy.webp", "ycc420.jpg", "cmyk.jpg", "gray16.png",
		"progressive.jpg", "restart_progressive.jpg", "ycck.jpg", "arith.jpg", "gif_small_frame_trns.gif", "rgba_lossy.webp"} {
		data, err := readTestdata(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(pngHeaderOnly(100000, 100000))
	f.Fuzz(func(t *testing.T, data []byte) {
		img, _, err := Decode(data, 1<<20)
		if err != nil {
			if _, ok := engine.AsInputError(err); !ok {
				t.Fatalf("error is not an InputError: %v", err)
			}
			return
		}
		if _, err := ToRGB(img); err != nil {
			t.Fatalf("decoded image does not convert: %v", err)
		}
	})
}
