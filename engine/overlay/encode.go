package overlay

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"sync"
)

// Encoder writes overlay PNGs fast and reuses its buffers and compressor state between
// calls. One Encoder may be shared by many goroutines; make it with NewEncoder.
//
// An opaque *image.RGBA (every overlay of a JPEG, which is most of them) takes a fast
// path: 8-bit RGB rows, each with PNG's "Sub" filter (difference to the pixel on the
// left), compressed with Huffman coding only (no LZ77 match search). Go's png.Encoder
// tries all five filters on every row and then runs deflate's match finder; on a 1080p
// photo the fast path spends about a quarter of its CPU time for a file about 6 % larger
// (docs/images.md has the figures). Anything else (transparency, other pixel layouts)
// goes through png.Encoder at BestSpeed.
type Encoder struct {
	std   png.Encoder
	state sync.Pool // *encodeState
}

// encodeState is the scratch of one encoding, pooled by its Encoder.
type encodeState struct {
	out  bytes.Buffer
	idat bytes.Buffer
	zw   *zlib.Writer
	line []byte // filter byte + one filtered RGB row
	row  []byte // the unfiltered RGB row
}

// NewEncoder returns an Encoder with empty pools.
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.std.CompressionLevel = png.BestSpeed
	e.std.BufferPool = &stdBuffers{}
	return e
}

// stdBuffers is the png.EncoderBufferPool of one Encoder's fallback path.
type stdBuffers struct{ pool sync.Pool }

func (p *stdBuffers) Get() *png.EncoderBuffer {
	b, _ := p.pool.Get().(*png.EncoderBuffer)
	return b
}

func (p *stdBuffers) Put(b *png.EncoderBuffer) { p.pool.Put(b) }

// EncodePNG encodes img as PNG and returns a slice the caller owns.
func (e *Encoder) EncodePNG(img image.Image) ([]byte, error) {
	if img == nil || img.Bounds().Empty() {
		return nil, fmt.Errorf("encode overlay PNG: image is empty")
	}
	st, _ := e.state.Get().(*encodeState)
	if st == nil {
		st = &encodeState{}
	}
	defer e.state.Put(st)
	st.out.Reset()
	var err error
	if m, ok := img.(*image.RGBA); ok && m.Opaque() {
		err = st.encodeOpaque(m)
	} else {
		err = e.std.Encode(&st.out, img)
	}
	if err != nil {
		return nil, fmt.Errorf("encode overlay PNG %dx%d: %w", img.Bounds().Dx(), img.Bounds().Dy(), err)
	}
	return bytes.Clone(st.out.Bytes()), nil
}

// encodeOpaque writes m as an 8-bit RGB PNG: signature, IHDR, one IDAT, IEND.
func (st *encodeState) encodeOpaque(m *image.RGBA) error {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	st.out.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8] = 8 // bits per sample
	ihdr[9] = 2 // colour type: RGB
	// compression, filter method and interlace stay 0
	writeChunk(&st.out, "IHDR", ihdr[:])

	st.idat.Reset()
	if st.zw == nil {
		zw, err := zlib.NewWriterLevel(&st.idat, zlib.HuffmanOnly)
		if err != nil {
			return err
		}
		st.zw = zw
	} else {
		st.zw.Reset(&st.idat)
	}
	st.line = grow(st.line, 1+3*w)
	st.row = grow(st.row, 3*w)
	const filterSub = 1
	for y := b.Min.Y; y < b.Max.Y; y++ {
		src := m.Pix[m.PixOffset(b.Min.X, y):][:4*w]
		row := st.row
		for x := 0; x < w; x++ {
			row[3*x], row[3*x+1], row[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
		}
		line := st.line
		line[0] = filterSub
		copy(line[1:4], row[:3])
		for i := 3; i < len(row); i++ {
			line[1+i] = row[i] - row[i-3]
		}
		if _, err := st.zw.Write(line); err != nil {
			return err
		}
	}
	if err := st.zw.Close(); err != nil {
		return err
	}
	writeChunk(&st.out, "IDAT", st.idat.Bytes())
	writeChunk(&st.out, "IEND", nil)
	return nil
}

// writeChunk appends one PNG chunk: length, type, data, CRC of type and data.
func writeChunk(out *bytes.Buffer, kind string, data []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	out.Write(n[:])
	out.WriteString(kind)
	out.Write(data)
	crc := crc32.Update(crc32.ChecksumIEEE([]byte(kind)), crc32.IEEETable, data)
	binary.BigEndian.PutUint32(n[:], crc)
	out.Write(n[:])
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
