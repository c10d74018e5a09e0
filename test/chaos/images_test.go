//go:build linux

package chaos

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"testing"
)

// Hostile images, made here so that each says exactly what it is.

// pngChunk is one PNG chunk with its length and CRC.
func pngChunk(typ string, data []byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, uint32(len(data)))
	b.WriteString(typ)
	b.Write(data)
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	_ = binary.Write(&b, binary.BigEndian, crc.Sum32())
	return b.Bytes()
}

// rgbPNG is an 8-bit RGB PNG whose header declares w x h, with idat as its image data.
func rgbPNG(w, h uint32, idat []byte) []byte {
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2 // bit depth 8, colour type RGB
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	b.Write(pngChunk("IHDR", ihdr[:]))
	b.Write(pngChunk("IDAT", idat))
	b.Write(pngChunk("IEND", nil))
	return b.Bytes()
}

// zeroRows is the zlib stream of h rows of w black RGB pixels, each row with its filter
// byte 0: h*(1+3w) zero bytes, a decompression bomb when w*h is large. The deflate data is
// written by hand, one fixed-Huffman block: a literal 0, back-references of 258 bytes at
// distance 1, the rest as literals (13 bits per 258 bytes), so a 200 MB bomb takes
// milliseconds to make, under the race detector too.
func zeroRows(w, h int) []byte {
	n := h * (1 + 3*w)
	bw := &bitWriter{out: []byte{0x78, 0x01}} // zlib: deflate, 32 KiB window, no dictionary
	bw.write(1, 1)                            // BFINAL
	bw.write(1, 2)                            // BTYPE 01: fixed Huffman codes
	literal0 := func() { bw.code(0x30, 8) }   // literal 0 is 00110000
	if n > 0 {
		literal0()
		for range (n - 1) / 258 {
			bw.code(0xC5, 8) // length code 285 (258 bytes) is 11000101
			bw.code(0, 5)    // distance code 0 (1 byte back)
		}
		for range (n - 1) % 258 {
			literal0()
		}
	}
	bw.code(0, 7) // end of block (256)
	bw.flush()
	// Adler-32 of n zero bytes: a stays 1, b adds a (1) per byte.
	return binary.BigEndian.AppendUint32(bw.out, uint32(n%65521)<<16|1)
}

// bitWriter writes deflate's bit stream: values least significant bit first, Huffman
// codes most significant bit first.
type bitWriter struct {
	out []byte
	acc uint64
	n   uint
}

func (b *bitWriter) write(v uint64, n uint) {
	b.acc |= v << b.n
	b.n += n
	for b.n >= 8 {
		b.out = append(b.out, byte(b.acc))
		b.acc >>= 8
		b.n -= 8
	}
}

func (b *bitWriter) code(c uint64, n uint) {
	var r uint64
	for range n {
		r = r<<1 | c&1
		c >>= 1
	}
	b.write(r, n)
}

func (b *bitWriter) flush() {
	if b.n > 0 {
		b.out = append(b.out, byte(b.acc))
		b.acc, b.n = 0, 0
	}
}

// TestZeroRowsIsAnImage checks the hand-made bomb format on a small size: image/png reads
// it as the all-black image it claims to be.
func TestZeroRowsIsAnImage(t *testing.T) {
	for _, wh := range [][2]int{{1, 1}, {30, 20}, {300, 7}} {
		img, err := png.Decode(bytes.NewReader(rgbPNG(uint32(wh[0]), uint32(wh[1]), zeroRows(wh[0], wh[1]))))
		if err != nil {
			t.Fatalf("%dx%d: %v", wh[0], wh[1], err)
		}
		if b := img.Bounds(); b.Dx() != wh[0] || b.Dy() != wh[1] {
			t.Fatalf("%dx%d decoded as %v", wh[0], wh[1], b)
		}
		if r, g, bl, _ := img.At(wh[0]-1, wh[1]-1).RGBA(); r|g|bl != 0 {
			t.Fatalf("%dx%d: a pixel is not black", wh[0], wh[1])
		}
	}
}

// smallPNG is a valid w x h PNG.
func smallPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// hugeJPEG is a valid small JPEG whose frame header (SOF0) is rewritten to declare
// side x side pixels.
func hugeJPEG(t testing.TB, side uint16) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 16, 16))
	for i := range img.Pix {
		img.Pix[i] = color.Gray{Y: byte(i)}.Y
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	i := bytes.Index(data, []byte{0xFF, 0xC0})
	if i < 0 {
		t.Fatal("no SOF0 marker in the encoded JPEG")
	}
	// FF C0, length (2), precision (1), height (2), width (2)
	binary.BigEndian.PutUint16(data[i+5:], side)
	binary.BigEndian.PutUint16(data[i+7:], side)
	return data
}

// hugeGIF is a GIF whose logical screen declares 65535 x 65535 around a 1x1 frame.
func hugeGIF() []byte {
	var b bytes.Buffer
	b.WriteString("GIF89a")
	_ = binary.Write(&b, binary.LittleEndian, uint16(65535))
	_ = binary.Write(&b, binary.LittleEndian, uint16(65535))
	b.Write([]byte{0x80, 0, 0})             // global colour table of 2 entries
	b.Write([]byte{0, 0, 0, 255, 255, 255}) // black, white
	b.Write([]byte{0x2C, 0, 0, 0, 0})       // image descriptor at 0,0
	_ = binary.Write(&b, binary.LittleEndian, uint16(65535))
	_ = binary.Write(&b, binary.LittleEndian, uint16(65535))
	b.Write([]byte{0, 2, 2, 0x44, 0x01, 0, 0x3B}) // LZW min code 2, one tiny block, trailer
	return b.Bytes()
}
