package imagemem

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/locateanything/detect/internal/testimage"
	"github.com/locateanything/detect/internal/testwait"
)

var bigPNG = testimage.PNGHeader(6000, 6000, 16, 2, 0)

func TestImageCostReadsTheHeaderOnly(t *testing.T) {
	dog, err := os.ReadFile("testdata/dog.jpg") // 768x576 baseline YCbCr
	if err != nil {
		t.Fatal(err)
	}
	// Frame headers alone: an APP0 segment, then SOF2 (progressive) or SOF9 (arithmetic
	// coding, which libjpeg decodes and image/jpeg does not) for a 768x512 YCbCr image.
	frame := func(sof byte) []byte {
		return append([]byte("\xff\xd8\xff\xe0\x00\x04ab\xff"), sof,
			0, 17, 8, 0x02, 0x00, 0x03, 0x00, 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0)
	}
	for _, c := range []struct {
		name    string
		img     []byte
		overlay bool
		want    int64
	}{
		{"16-bit RGB PNG", bigPNG, false, bigCost},
		{"16-bit RGB PNG with an overlay", bigPNG, true, 6000*6000*(8+OverlayBytesPerPixel) + 33},
		{"8-bit RGB PNG", testimage.PNGHeader(1000, 1000, 8, 2, 0), false, 1000*1000*(4+PrepareBytesPerPixel) + 33},
		{"8-bit gray PNG", testimage.PNGHeader(1000, 1000, 8, 0, 0), false, 1000*1000*(1+PrepareBytesPerPixel) + 33},
		{"interlaced 16-bit PNG", testimage.PNGHeader(1000, 1000, 16, 2, 1), false, 1000*1000*(16+PrepareBytesPerPixel) + 33},
		{"baseline JPEG", dog, false, 768*576*(4+PrepareBytesPerPixel) + int64(len(dog))},
		{"progressive JPEG", frame(0xC2), false, 768*512*(4+3*4+PrepareBytesPerPixel) + 27},
		{"arithmetic-coded JPEG", frame(0xC9), false, 768*512*(4+PrepareBytesPerPixel) + 27},
		{"no image", []byte("this is not a picture"), false, 21},
		{"a truncated header", bigPNG[:20], false, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, _, _ := Cost(c.img, c.overlay); got != c.want {
				t.Errorf("Cost = %d, want %d", got, c.want)
			}
		})
	}
	// A GIF whose first frame reaches past its logical screen is opened on a canvas that
	// holds the frame.
	gif := []byte("GIF89a\x0a\x00\x0a\x00\x00\x00\x00" + "\x21\xf9\x04\x00\x00\x00\x00\x00" +
		"\x2c\x05\x00\x06\x00\x00\x10\x00\x08\x00")
	if w, h := gifCanvas(gif, 10, 10); w != 5+4096 || h != 6+2048 {
		t.Errorf("gifCanvas = %dx%d, want the frame's reach 4101x2054", w, h)
	}
}

func TestMemoryBudgetGrantsWhatFitsAndHandsBackOnCancel(t *testing.T) {
	b := NewBudget(100)
	ctx := t.Context()
	if err := b.Acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	bigGot := make(chan error, 1)
	go func() { bigGot <- b.Acquire(ctx, 70) }()
	testwait.Until(t, time.Minute, "the large reservation to wait", func() bool { _, n := inUse(b); return n == 1 })
	if err := b.Acquire(ctx, 40); err != nil { // fits beside the first, past the waiting one
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() { gone <- b.Acquire(cctx, 50) }()
	testwait.Until(t, time.Minute, "two reservations to wait", func() bool { _, n := inUse(b); return n == 2 })
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a cancelled wait reported success")
	}
	b.Release(60)
	b.Release(40)
	if err := <-bigGot; err != nil {
		t.Fatal(err)
	}
	if used, waiting := inUse(b); used != 70 || waiting != 0 {
		t.Fatalf("in use %d, waiting %d; want 70 and 0", used, waiting)
	}
	b.Release(70)

	// Many holders and waiters, some giving up: every byte comes back.
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i%7)*time.Millisecond)
			defer cancel()
			n := int64(1 + i%60)
			if b.Acquire(ctx, n) == nil {
				time.Sleep(time.Duration(i%3) * time.Millisecond)
				b.Release(n)
			}
		})
	}
	wg.Wait()
	if used, waiting := inUse(b); used != 0 || waiting != 0 {
		t.Fatalf("after the crowd: in use %d, waiting %d; want nothing", used, waiting)
	}
}

// TestLargeImagesWaitForTheMemoryBudgetAndSmallOnesPass: six 36-megapixel 16-bit PNGs at
// once took 2.3 GB, and the 64 pending requests could have taken 16 GB: admission counted
// requests, not their decoded size. Now only what fits in LA_HTTP_MAX_DECODED_BYTES is
// prepared; the rest wait, while an ordinary photo that fits goes ahead.

const bigCost = 6000*6000*(8+PrepareBytesPerPixel) + 33 // 33: the header's own bytes

func inUse(b *Budget) (used int64, waiting int) {
	s := b.Stats()
	return s.Used, s.Waiting
}
