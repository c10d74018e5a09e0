package imageproc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/testimage"
)

// notInputError fails t if err is an *engine.InputError: a decode stopped by its context
// says nothing about the image, and must not fail the job as bad_image.
func notInputError(t *testing.T, what string, err error) {
	t.Helper()
	if _, ok := engine.AsInputError(err); ok {
		t.Errorf("%s: %v is an input error; a stopped decode is not the image's fault", what, err)
	}
}

// Issue 23, defect 7: a SIGTERM waited for image decoding (four large PNGs kept a worker
// with LA_GRACE=2s alive for 21.6 s). A 40-megapixel 16-bit PNG (0.4 MB, 320 MB decoded,
// seconds of inflating) now stops within moments of its context ending.
func TestDecodeOfALargePNGStopsWhenItsContextEnds(t *testing.T) {
	data := testimage.UniformPNG(8000, 5000, true)
	o := DefaultOptions()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	img, _, err := o.DecodeContext(ctx, data)
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) || img != nil {
		t.Fatalf("decode cancelled at 300 ms returned %v, %v after %v; want context.Canceled", img, err, took)
	}
	notInputError(t, "PNG", err)
	t.Logf("decode cancelled at 300 ms returned after %v", took)
	// The decoder reads 4 KB of the file (4 MB of pixels here) between looks at ctx.
	if took > 2*time.Second {
		t.Errorf("decode cancelled at 300 ms returned after %v", took)
	}
}

// Every decoder stops on a context that has ended, and so do the resize passes, between
// stripes of rows.
func TestDecodersAndResizesStopOnAnEndedContext(t *testing.T) {
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	o := DefaultOptions()
	for _, name := range []string{"rgb.jpg", "progressive.jpg", "cmyk.jpg", "palette.gif", "lossy.webp", "rgba_lossless.webp", "rgb16.png"} {
		data, err := readTestdata(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = o.DecodeContext(ended, data)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s on an ended context: %v, want context.Canceled", name, err)
		}
		notInputError(t, name, err)
	}
	src := NewRGB(1000, 800)
	for _, size := range [][2]int{{300, 200}, {1000, 200}, {300, 800}} {
		if _, err := resizePlane(ended, src.plane(), size[0], size[1]); !errors.Is(err, context.Canceled) {
			t.Errorf("resize to %v on an ended context: %v", size, err)
		}
	}
	img, _, err := o.Decode(testimage.UniformPNG(1000, 800, false))
	if err != nil {
		t.Fatal(err)
	}
	_, err = PreprocessContext(ended, img, o)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("preprocess on an ended context: %v", err)
	}
	notInputError(t, "preprocess", err)
	// A live context changes nothing: the same pixels as without one.
	want, err := Preprocess(img, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := PreprocessContext(t.Context(), img, o)
	if err != nil || len(got.Patches) != len(want.Patches) {
		t.Fatalf("preprocess with a live context: %v", err)
	}
	for i := range got.Patches {
		if got.Patches[i] != want.Patches[i] {
			t.Fatalf("patch value %d differs with a context", i)
		}
	}
}
