package imageproc

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
)

// The helpers of this file are named fuzz* so as not to collide with the package's other
// tests.

// fuzzSecret stands for the start of a file that is not an image (a job may name any
// file the worker can read): no error message may carry any of it.
const fuzzSecret = "root:x:0:0:root:/root:/bin/bash\n"

// fuzzBudget is the pixel budget of FuzzDecodeLimits: small, so that each input decodes
// fast.
const fuzzBudget = 1 << 16

// fuzzHugeHeaders are files that end after a header claiming far more pixels than any
// budget allows: 50000x50000 where the format can say so, and where it cannot the most it
// can: 40000x40000 (VP8X, whose reader refuses a canvas over 2^31 pixels as invalid),
// 16384x16384 (VP8L), 16383x16383 (VP8).
func fuzzHugeHeaders() map[string][]byte {
	return map[string][]byte{
		"png":  fuzzPNGHeader(50000, 50000),
		"jpeg": fuzzJPEGHeader(50000, 50000),
		// Bytes that spell part of the refusal's own size text are not a quote of them.
		"jpeg digits": append(fuzzJPEGHeader(50000, 50000), "00000000"...),
		"gif":         fuzzGIFHeader(50000, 50000),
		"vp8x":        fuzzWebP("VP8X", fuzzVP8X(40000, 40000)),
		"vp8l":        fuzzWebP("VP8L", []byte{0x2f, 0xff, 0xff, 0xff, 0x0f}),
		"vp8":         fuzzWebP("VP8 ", []byte{0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0xff, 0x3f, 0xff, 0x3f}),
	}
}

// fuzzPNGHeader is the signature and an IHDR for a w x h 8-bit RGB image, then nothing.
func fuzzPNGHeader(w, h uint32) []byte {
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 2, 0, 0, 0)
	return fuzzPNGChunk([]byte("\x89PNG\r\n\x1a\n"), "IHDR", ihdr)
}

// fuzzPNGChunk appends a PNG chunk with its CRC.
func fuzzPNGChunk(b []byte, typ string, data []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	c := append([]byte(typ), data...)
	b = append(b, c...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(c))
}

// fuzzJPEGHeader is SOI, a baseline SOF0 for a w x h 4:2:0 image, and a start of scan,
// then nothing.
func fuzzJPEGHeader(w, h uint16) []byte {
	b := []byte{0xff, 0xd8, 0xff, 0xc0, 0, 17, 8}
	b = binary.BigEndian.AppendUint16(b, h)
	b = binary.BigEndian.AppendUint16(b, w)
	b = append(b, 3, 1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0)
	return append(b, 0xff, 0xda, 0, 12, 3, 1, 0, 2, 0, 3, 0, 0, 63, 0)
}

// fuzzGIFHeader is a GIF89a logical screen of w x h with no colour table and the
// descriptor of a frame covering it, then nothing.
func fuzzGIFHeader(w, h uint16) []byte {
	b := []byte("GIF89a")
	b = binary.LittleEndian.AppendUint16(b, w)
	b = binary.LittleEndian.AppendUint16(b, h)
	b = append(b, 0, 0, 0, ',', 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint16(b, w)
	b = binary.LittleEndian.AppendUint16(b, h)
	return append(b, 0)
}

// fuzzVP8X is a VP8X chunk's flags and canvas size (24-bit fields of size-1).
func fuzzVP8X(w, h uint32) []byte {
	b := make([]byte, 10)
	b[4], b[5], b[6] = byte(w-1), byte((w-1)>>8), byte((w-1)>>16)
	b[7], b[8], b[9] = byte(h-1), byte((h-1)>>8), byte((h-1)>>16)
	return b
}

// fuzzWebP is a RIFF WEBP file holding one chunk.
func fuzzWebP(fourcc string, payload []byte) []byte {
	c := append([]byte(fourcc), binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))...)
	c = append(c, payload...)
	if len(payload)%2 == 1 {
		c = append(c, 0)
	}
	b := binary.LittleEndian.AppendUint32([]byte("RIFF"), uint32(4+len(c)))
	return append(append(b, "WEBP"...), c...)
}

// fuzzSecretSeeds carry the secret where each decoder may trip over it: straight after
// each format's signature, in a PNG text chunk, in place of PNG chunks and of image data,
// in a JPEG comment and after its header, in a GIF comment and as its screen, as a WebP
// chunk, its name and a VP8L bitstream.
func fuzzSecretSeeds() map[string][]byte {
	s := []byte(fuzzSecret)
	hdr := func() []byte { return fuzzPNGHeader(10, 10) }
	return map[string][]byte{
		"raw":            s,
		"after png":      append([]byte("\x89PNG\r\n\x1a\n"), s...),
		"png text":       fuzzPNGChunk(hdr(), "tEXt", append([]byte("Comment\x00"), s...)),
		"png chunk":      append(hdr(), s...),
		"png idat":       fuzzPNGChunk(hdr(), "IDAT", s),
		"after jpeg":     append([]byte{0xff, 0xd8, 0xff}, s...),
		"jpeg comment":   append(append([]byte{0xff, 0xd8, 0xff, 0xfe, 0, byte(2 + len(s))}, s...), s...),
		"jpeg after sos": append(fuzzJPEGHeader(10, 10), s...),
		"after gif":      append([]byte("GIF89a"), s...),
		"gif comment":    append(append(fuzzGIFHeader(10, 10), 0x21, 0xfe, byte(len(s))), s...),
		"webp chunk":     fuzzWebP("VP8 ", s),
		"webp fourcc":    fuzzWebP(fuzzSecret[:4], s),
		"webp vp8l":      fuzzWebP("VP8L", append([]byte{0x2f, 9, 0x40, 2, 0}, s...)),
	}
}

// fuzzDecodeSeeds are the repository's test images of up to 256 KiB (the package's
// testdata, one of each format and layout, and the photographs in testdata/images), the
// huge headers and the secrets.
func fuzzDecodeSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, pattern := range []string{"testdata/*", "../../testdata/images/*"} {
		paths, err := filepath.Glob(pattern)
		if err != nil {
			tb.Fatal(err)
		}
		for _, p := range paths {
			if Sniff(fuzzHead(p)) == "" || strings.HasSuffix(p, ".want.png") || strings.HasSuffix(p, ".decoded.png") {
				continue // not an input: a golden, or not an image at all
			}
			if st, err := os.Stat(p); err != nil || st.Size() > 256<<10 {
				continue
			}
			data, err := os.ReadFile(p)
			if err != nil {
				tb.Fatal(err)
			}
			seeds = append(seeds, data)
		}
	}
	if len(seeds) < 8 {
		tb.Fatalf("only %d test images found", len(seeds))
	}
	for _, m := range []map[string][]byte{fuzzHugeHeaders(), fuzzSecretSeeds()} {
		for _, data := range m {
			seeds = append(seeds, data)
		}
	}
	return seeds
}

// fuzzHead is the first bytes of a file, enough to sniff it.
func fuzzHead(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, 16)
	n, _ := f.Read(b)
	return b[:n]
}

// fuzzAllocated is the number of bytes fn allocates on the Go heap (what a C decoder
// allocates itself is not counted; the pixel buffers are Go's).
func fuzzAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// fuzzWatchdog crashes the process unless stop is called within d: a decoder that loops
// on some input would otherwise stall the fuzzer silently, while a crash makes it save
// the input.
func fuzzWatchdog(d time.Duration, what string) (stop func() bool) {
	return time.AfterFunc(d, func() { panic(fmt.Sprintf("%s has not returned after %v", what, d)) }).Stop
}

// fuzzAllocBound is the most a decode of n bytes within budget pixels may allocate: the
// image at up to 8 bytes a pixel (twice over for an interlaced PNG's passes), a
// converted copy, decoder tables and buffers, a little per input byte.
func fuzzAllocBound(budget int64, n int) uint64 {
	return uint64(64*budget) + uint64(64*n) + 24<<20
}

// fuzzTooLargeAlloc is the most a refusal as image_too_large may allocate: it comes from
// the header alone.
func fuzzTooLargeAlloc(n int) uint64 { return 256<<10 + 2*uint64(n) }

// FuzzDecodeLimits: whatever the bytes, Decode (with a budget of 65536 pixels) and
// Options.Decode
//   - never panic, not even inside a decoder (the guard in decode would turn that into
//     bad_image "decoder failed"), and return within seconds;
//   - allocate within fuzzAllocBound, and next to nothing when they refuse the image as
//     too large (the header is read before any pixel buffer exists);
//   - refuse with an *engine.InputError of code bad_image or image_too_large whose
//     message quotes none of the input;
//   - or give an image within the budget, of the format the signature names, that
//     converts to RGB and (if Options.Decode takes it too) preprocesses.
func FuzzDecodeLimits(f *testing.F) {
	for _, data := range fuzzDecodeSeeds(f) {
		f.Add(data)
	}
	o := DefaultOptions()
	o.MaxPixels, o.InTokenLimit, o.CanonGrid = fuzzBudget, 64, [2]int{}
	f.Fuzz(func(t *testing.T, data []byte) {
		var img image.Image
		var format string
		var err error
		stop := fuzzWatchdog(20*time.Second, fmt.Sprintf("Decode of %d bytes", len(data)))
		n := fuzzAllocated(func() { img, format, err = Decode(data, fuzzBudget) })
		stop()
		if b := fuzzAllocBound(fuzzBudget, len(data)); n > b {
			t.Fatalf("Decode of %d bytes allocated %d bytes, over %d", len(data), n, b)
		}
		if err != nil {
			fuzzCheckDecodeError(t, data, err, n)
			return
		}
		fuzzCheckDecoded(t, data, img, format)

		stop = fuzzWatchdog(20*time.Second, fmt.Sprintf("Options.Decode of %d bytes", len(data)))
		img2, _, err := o.Decode(data)
		stop()
		if err != nil {
			// Within the budget, but a grid side would reach MaxGridSide.
			if ie, ok := engine.AsInputError(err); !ok || ie.Code != engine.CodeImageTooLarge {
				t.Fatalf("Decode takes the image, Options.Decode says %v", err)
			}
			return
		}
		res, err := Preprocess(img2, o)
		if err != nil || len(res.Patches) == 0 {
			t.Fatalf("%v image decoded, but does not preprocess: %v", img2.Bounds(), err)
		}
	})
}

// fuzzCheckDecodeError: the refusal of data, having allocated n bytes, is an InputError
// of a decode code that quotes none of data; too large is decided before decoding.
func fuzzCheckDecodeError(t *testing.T, data []byte, err error, n uint64) {
	t.Helper()
	ie, ok := engine.AsInputError(err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *engine.InputError", err, err)
	}
	msg := err.Error()
	switch {
	case ie.Code != engine.CodeBadImage && ie.Code != engine.CodeImageTooLarge:
		t.Fatalf("code %q (%v)", ie.Code, err)
	case strings.Contains(msg, "decoder failed"):
		t.Fatalf("a decoder panicked: %v", err)
	case ie.Code == engine.CodeImageTooLarge && n > fuzzTooLargeAlloc(len(data)):
		t.Fatalf("refused as too large after allocating %d bytes: %v", n, err)
	}
	if leak := fuzzQuoted(msg, data); leak != "" {
		t.Fatalf("message %q quotes the input (%q)", msg, leak)
	}
}

// fuzzQuoted is a run of 8 bytes of data, or 6 of the secret, found in msg, or "". A
// run that is only digits, 'x', '=', ',' and spaces does not count: a refusal states the
// image's size ("50000x50000 = 2500000000 pixels"), and input bytes that happen to spell
// "00000000" are not quoted by it.
func fuzzQuoted(msg string, data []byte) string {
	for i := 0; i+6 <= len(fuzzSecret); i++ {
		if strings.Contains(msg, fuzzSecret[i:i+6]) {
			return fuzzSecret[i : i+6]
		}
	}
	for i := 0; i+8 <= len(data); i++ {
		window := string(data[i : i+8])
		if strings.Trim(window, "0123456789x=, ") == "" {
			continue
		}
		if strings.Contains(msg, window) {
			return string(data[i : i+8])
		}
	}
	return ""
}

func fuzzCheckDecoded(t *testing.T, data []byte, img image.Image, format string) {
	t.Helper()
	b := img.Bounds()
	if b.Empty() || int64(b.Dx())*int64(b.Dy()) > fuzzBudget {
		t.Fatalf("decoded %v, over the budget of %d pixels", b, fuzzBudget)
	}
	if format != Sniff(data) {
		t.Fatalf("format %q, the signature says %q", format, Sniff(data))
	}
	rgb, err := ToRGB(img)
	if err != nil || rgb.W != b.Dx() || rgb.H != b.Dy() || len(rgb.Pix) != 3*rgb.W*rgb.H {
		t.Fatalf("decoded %v, ToRGB gives %v", b, err)
	}
}

// TestDecodeRefusesHugeHeadersBeforeAllocating: a file that is only a header claiming
// 50000x50000 (or the most its format can say) is refused as image_too_large, whatever
// the format, with next to nothing allocated: the budget is checked before any pixel
// buffer exists.
func TestDecodeRefusesHugeHeadersBeforeAllocating(t *testing.T) {
	for name, data := range fuzzHugeHeaders() {
		t.Run(name, func(t *testing.T) {
			for _, decode := range []func([]byte) (image.Image, string, error){
				func(b []byte) (image.Image, string, error) { return Decode(b, 0) },
				DefaultOptions().Decode,
			} {
				_, _, err := decode(data)
				if ie, ok := engine.AsInputError(err); !ok || ie.Code != engine.CodeImageTooLarge {
					t.Fatalf("error %v, want an InputError %s", err, engine.CodeImageTooLarge)
				}
				const runs = 20
				if n := fuzzAllocated(func() {
					for range runs {
						_, _, _ = decode(data)
					}
				}) / runs; n > 64<<10 {
					t.Errorf("refusing the header allocated %d bytes", n)
				}
			}
		})
	}
}

// TestDecodeErrorsDoNotQuoteTheInput: whichever decoder trips over the bytes of a file
// that is not an image, its message says what is wrong, never what the bytes are.
func TestDecodeErrorsDoNotQuoteTheInput(t *testing.T) {
	for name, data := range fuzzSecretSeeds() {
		t.Run(name, func(t *testing.T) {
			_, _, err := Decode(data, 0)
			if err == nil {
				t.Fatal("decoded")
			}
			fuzzCheckDecodeError(t, data, err, 0)
		})
	}
}
