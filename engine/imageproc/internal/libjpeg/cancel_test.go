package libjpeg

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A decode whose context ends stops at its next stripe of scanlines with ctx's error, not
// a verdict on the file; one whose context stays live decodes the same file in full.
func TestDecodeStopsWhenItsContextEnds(t *testing.T) {
	const w, h = 2048, 2048
	pix := make([]byte, 3*w*h)
	for i := range pix {
		pix[i] = byte(i * 7)
	}
	for _, progressive := range []bool{false, true} {
		data, err := Encode(pix, 3*w, w, h, 3, EncodeOptions{Quality: 90, Progressive: progressive})
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := ReadHeader(data)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4*w*h)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err = DecodeContext(ctx, data, hdr, out, 4*w)
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTruncated) {
			t.Errorf("progressive %v: a cancelled decode returned %v, want context.Canceled", progressive, err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
		err = DecodeContext(ctx, data, hdr, out, 4*w)
		cancel()
		if err != nil {
			t.Errorf("progressive %v: a live context: %v", progressive, err)
		}
	}
}
