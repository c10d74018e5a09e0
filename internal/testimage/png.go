// Package testimage makes images for tests: PNGs that are small to store and send but
// large once decoded, the shape of a decoder bomb within the pixel limit.
package testimage

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
)

// The zlib stream of n copies of one row: the rows through the compressor until its
// 32 KB window holds nothing but copies, then one stretch of stripe rows, sync-flushed so
// that it ends on a byte; since every window it can refer back into is the same, that
// stretch is repeated as it is. The compressor then writes the rest and the trailer, whose
// Adler-32 (of the rows it saw) is replaced by that of all of them.
const stripe = 64

func uniformZlib(row []byte, n int) []byte {
	var b bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&b, zlib.BestSpeed) // a valid level cannot fail
	warm := min(n, 32<<10/len(row)+2)
	for range warm {
		_, _ = zw.Write(row) // writes to a bytes.Buffer do not fail
	}
	done := warm
	if n-done >= 2*stripe {
		_ = zw.Flush()
		mark := b.Len()
		for range stripe {
			_, _ = zw.Write(row)
		}
		_ = zw.Flush()
		seg := bytes.Clone(b.Bytes()[mark:])
		done += stripe
		for ; n-done >= stripe; done += stripe {
			b.Write(seg)
		}
	}
	for ; done < n; done++ {
		_, _ = zw.Write(row)
	}
	_ = zw.Close()
	out := b.Bytes()
	binary.BigEndian.PutUint32(out[len(out)-4:], adler32Repeated(row, n))
	return out
}

// adler32Repeated is the Adler-32 of n copies of row, one row at a time.
func adler32Repeated(row []byte, n int) uint32 {
	const mod = 65521
	var sum, weighted uint64 // of one row: its bytes, and each byte times its distance from the end
	for i, c := range row {
		sum += uint64(c)
		weighted += uint64(len(row)-i) * uint64(c)
	}
	sum, weighted = sum%mod, weighted%mod
	a, b := uint64(1), uint64(0)
	for range n {
		b = (b + uint64(len(row))%mod*a + weighted) % mod
		a = (a + sum) % mod
	}
	return uint32(b<<16 | a)
}

// UniformPNG is a valid, non-interlaced w x h PNG whose pixels are all one colour: 16-bit
// RGBA (colour type 6, 8 bytes a pixel decoded) with deep, else 8-bit RGB. Its rows are
// compressed once and the compressed stretch repeated, so making one takes neither the
// decoded size in memory nor the time to compress it (which the race detector makes
// minutes): an 8000x5000 16-bit RGBA one is about 400 KB and decodes to 320 MB.
func UniformPNG(w, h int, deep bool) []byte {
	depth, colorType, bpp := byte(8), byte(2), 3
	if deep {
		depth, colorType, bpp = 16, 6, 8
	}
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = depth, colorType // compression, filter and interlace 0
	writeChunk(&out, "IHDR", ihdr)

	row := make([]byte, 1+bpp*w) // filter byte 0 (none), then the pixels
	for x := 0; x < w; x++ {
		px := row[1+bpp*x : 1+bpp*(x+1)]
		for i := range px {
			px[i] = 0x80 // mid grey, and with deep half transparent: ToRGB blends it
		}
	}
	writeChunk(&out, "IDAT", uniformZlib(row, h))
	writeChunk(&out, "IEND", nil)
	return out.Bytes()
}

func writeChunk(b *bytes.Buffer, kind string, data []byte) {
	_ = binary.Write(b, binary.BigEndian, uint32(len(data)))
	chunk := append([]byte(kind), data...)
	b.Write(chunk)
	_ = binary.Write(b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
}

// PNGHeader is a PNG that stops after its IHDR chunk: a header claiming a w x h image of
// the given bit depth, colour type (0 gray, 2 RGB, 6 RGBA) and interlace method, with no
// pixel data. What reads only the header (a cost estimate, a size check) sees a large
// image that costs nothing to store or send; a decoder fails on it.
func PNGHeader(w, h int, depth, colorType, interlace byte) []byte {
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9], ihdr[12] = depth, colorType, interlace // compression and filter 0
	writeChunk(&out, "IHDR", ihdr)
	return out.Bytes()
}
