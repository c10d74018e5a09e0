package imageproc

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// A resize that reproduces PIL 9.4's Image.resize(size, Image.BICUBIC) on an 8-bit RGB
// image bit for bit (libImaging/Resample.c):
//
//   - the cubic convolution kernel with a = -0.5 and support 2;
//   - when shrinking, the kernel is stretched by the scale factor (support 2*scale), which
//     is what makes PIL's resize antialiased;
//   - per output sample the weights are computed in float64, normalized to sum 1, then
//     converted to fixed point with 22 fractional bits, rounding half away from zero;
//   - a pass accumulates integer products starting from one half (1<<21) and clips
//     (sum >> 22) to 0..255;
//   - the horizontal pass runs first, into an 8-bit intermediate image (so it is rounded
//     and clipped), then the vertical pass; a pass whose size does not change is skipped.
//
// Go may fuse a*b+c into one FMA instruction on some architectures, which would change
// the rounding of the weights; the explicit float64 conversions below forbid that.

const (
	precisionBits = 32 - 8 - 2 // PIL's PRECISION_BITS: 8 bits of result, 2 of headroom
	bicubicA      = -0.5
	bicubicSpan   = 2.0
)

// bicubic is PIL's bicubic_filter.
func bicubic(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return float64(float64(float64(float64((bicubicA+2)*x)-(bicubicA+3))*x)*x) + 1
	}
	if x < 2 {
		return float64(float64(float64(float64(float64(x-5)*x)+8)*x)-4) * bicubicA
	}
	return 0
}

// weights are the fixed-point filter taps of one axis: output sample i reads n[i] input
// samples from first[i] on, with coefficients k[i*size : i*size+n[i]].
type weights struct {
	first, n []int
	k        []int32
	size     int // taps reserved per output sample
}

// pilWeights is PIL's precompute_coeffs followed by normalize_coeffs_8bpc for a resize of
// inSize samples onto outSize samples over the whole input.
func pilWeights(inSize, outSize int) weights {
	scale := float64(inSize) / float64(outSize)
	filterScale := max(scale, 1.0)
	support := bicubicSpan * filterScale
	size := int(math.Ceil(support))*2 + 1
	w := weights{
		first: make([]int, outSize),
		n:     make([]int, outSize),
		k:     make([]int32, outSize*size),
		size:  size,
	}
	taps := make([]float64, size)
	inv := 1.0 / filterScale
	for i := 0; i < outSize; i++ {
		center := float64(float64(i)+0.5) * scale
		lo := max(int(center-support+0.5), 0)
		hi := min(int(center+support+0.5), inSize)
		n := hi - lo
		total := 0.0
		for x := 0; x < n; x++ {
			t := bicubic(float64(float64(x+lo)-center+0.5) * inv)
			taps[x] = t
			total += t
		}
		k := w.k[i*size : i*size+n]
		for x := range k {
			t := taps[x]
			if total != 0 {
				t /= total
			}
			scaled := float64(t * (1 << precisionBits))
			if t < 0 {
				k[x] = int32(int(-0.5 + scaled))
			} else {
				k[x] = int32(int(0.5 + scaled))
			}
		}
		w.first[i], w.n[i] = lo, n
	}
	return w
}

// clip8 is PIL's clip8: drop the fraction bits, clamp to a byte.
func clip8(v int32) uint8 {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// MaxResizeSide bounds either side of a resize target. It keeps the coefficient tables
// and the intermediate image to sane sizes whatever a caller asks for.
const MaxResizeSide = 1 << 16

// ResizeBicubic resizes src to w x h exactly as PIL 9.4's Image.resize((w, h),
// Image.BICUBIC) does for an "RGB" image.
func ResizeBicubic(src *RGB, w, h int) (*RGB, error) {
	if src == nil || src.W <= 0 || src.H <= 0 || len(src.Pix) != 3*src.W*src.H {
		return nil, fmt.Errorf("resize: source image is empty or malformed")
	}
	return resizePlane(context.Background(), src.plane(), w, h)
}

// plane is the pixel layout a resize reads: 3 bytes a pixel (RGB) or 4 (an opaque RGBA
// image, whose fourth byte is ignored), rows stride bytes apart.
type plane struct {
	pix         []uint8
	w, h        int
	stride, bpp int
}

func (r *RGB) plane() plane { return plane{pix: r.Pix, w: r.W, h: r.H, stride: 3 * r.W, bpp: 3} }

// row is source row y, from its first byte to the end of the buffer.
func (p plane) row(y int) []uint8 { return p.pix[y*p.stride:] }

// rgb copies the plane into an RGB image; errNotOpaque if a 4-byte pixel has alpha.
func (p plane) rgb() (*RGB, error) {
	out := NewRGB(p.w, p.h)
	for y := 0; y < p.h; y++ {
		src, dst := p.row(y), out.Pix[3*p.w*y:3*p.w*(y+1)]
		if p.bpp == 3 {
			copy(dst, src)
			continue
		}
		if !opaqueRow(src[:4*p.w]) {
			return nil, errNotOpaque
		}
		for x := 0; x < p.w; x++ {
			d, s := dst[3*x:3*x+3:3*x+3], src[4*x:4*x+3:4*x+3]
			d[0], d[1], d[2] = s[0], s[1], s[2]
		}
	}
	return out, nil
}

// opaqueRow reports whether every fourth byte of a row of 4-byte pixels is 255, 32
// bytes at a time.
func opaqueRow(row []uint8) bool {
	const alphas = 0xFF000000_FF000000
	le := binary.LittleEndian
	for len(row) >= 32 {
		if le.Uint64(row)&le.Uint64(row[8:])&le.Uint64(row[16:])&le.Uint64(row[24:])&alphas != alphas {
			return false
		}
		row = row[32:]
	}
	for ; len(row) >= 4; row = row[4:] {
		if row[3] != 0xFF {
			return false
		}
	}
	return true
}

// resizePlane is ResizeBicubic on any plane; the result is RGB. It stops, with an error
// wrapping ctx.Err(), at the first stripe of rows after ctx is done.
func resizePlane(ctx context.Context, src plane, w, h int) (*RGB, error) {
	if w <= 0 || h <= 0 || w > MaxResizeSide || h > MaxResizeSide {
		return nil, fmt.Errorf("resize: target %dx%d out of range 1..%d", w, h, MaxResizeSide)
	}
	if w == src.w && h == src.h {
		return src.rgb()
	}
	vert := pilWeights(src.h, h)
	var cur *RGB
	if w != src.w {
		// Only the rows the vertical pass reads are resampled, as PIL does.
		firstRow := vert.first[0]
		lastRow := vert.first[h-1] + vert.n[h-1]
		var err error
		if cur, err = resampleRows(ctx, src, pilWeights(src.w, w), firstRow, lastRow, h != src.h); err != nil {
			return nil, err
		}
		for i := range vert.first {
			vert.first[i] -= firstRow
		}
	} else {
		var err error
		if cur, err = src.rgb(); err != nil {
			return nil, err
		}
	}
	if h != src.h {
		tmp := cur
		var err error
		cur, err = resampleColumns(ctx, cur, vert)
		if w != src.w {
			scratch.Put(&tmp.Pix)
		}
		if err != nil {
			return nil, err
		}
	}
	return cur, nil
}

// scratch holds the buffers of horizontal passes whose result only the vertical pass
// reads, so that a resize does not clear a fresh one each time: every byte of it is
// written before it is read.
var scratch sync.Pool

// scratchRGB is an RGB image from the scratch pool, its contents undefined.
func scratchRGB(w, h int) *RGB {
	if p, ok := scratch.Get().(*[]uint8); ok && cap(*p) >= 3*w*h {
		return &RGB{Pix: (*p)[:3*w*h], W: w, H: h}
	}
	return NewRGB(w, h)
}

// resampleRows is the horizontal pass over source rows [firstRow, lastRow); with
// intermediate, its buffer comes from the scratch pool (resizePlane returns it there).
// It reads only those rows, and refuses a 4-byte row with alpha (errNotOpaque).
func resampleRows(ctx context.Context, src plane, wt weights, firstRow, lastRow int, intermediate bool) (*RGB, error) {
	outW := len(wt.first)
	var out *RGB
	if intermediate {
		out = scratchRGB(outW, lastRow-firstRow)
	} else {
		out = NewRGB(outW, lastRow-firstRow)
	}
	if useAVX2 {
		if opaque, err := resampleRowsAVX2(ctx, out, src, wt, firstRow, lastRow); err != nil {
			return nil, err
		} else if !opaque {
			return nil, errNotOpaque
		}
		return out, nil
	}
	const half = int32(1) << (precisionBits - 1)
	bpp := src.bpp
	for y := firstRow; y < lastRow; y++ {
		if (y-firstRow)%stripeRows == 0 {
			if err := canceled(ctx, "resize"); err != nil {
				return nil, err
			}
		}
		in := src.row(y)[:bpp*src.w]
		if bpp == 4 && !opaqueRow(in) {
			return nil, errNotOpaque
		}
		dst := out.Pix[3*outW*(y-firstRow) : 3*outW*(y-firstRow+1)]
		for x := 0; x < outW; x++ {
			lo, n := wt.first[x], wt.n[x]
			k := wt.k[x*wt.size : x*wt.size+n]
			px := in[bpp*lo : bpp*(lo+n)]
			r, g, b := half, half, half
			for i, c := range k {
				p := px[bpp*i : bpp*i+3 : bpp*i+3]
				r += int32(p[0]) * c
				g += int32(p[1]) * c
				b += int32(p[2]) * c
			}
			d := dst[3*x : 3*x+3 : 3*x+3]
			d[0], d[1], d[2] = clip8(r), clip8(g), clip8(b)
		}
	}
	return out, nil
}

// resampleRowsAVX2 is resampleRows with hquadAVX2, four rows at a time (the last few
// one at a time, as four copies of one row). The kernel reads up to 16 bytes past a row's
// last pixel (taps go in fours, those past the last against zero coefficients, and a
// four of pixels is read as 16 bytes): bytes of the next row, except after the plane's
// last row, which is read from a copy with room after it. It returns false on a 4-byte
// row with alpha, which only ToRGB converts right, and an error once ctx is done.
func resampleRowsAVX2(ctx context.Context, out *RGB, src plane, wt weights, firstRow, lastRow int) (bool, error) {
	outW := len(wt.first)
	bounds := make([]int32, 2*outW)
	k := quadTaps(wt, bounds, src.bpp)
	mask, bpp := quadMask(src.bpp), src.bpp
	rowLen := bpp * src.w
	opaque := true // of a 4-byte plane: the kernel reports the alpha of what it read
	y := firstRow
	for ; y+4 <= lastRow && len(src.row(y+3)) >= rowLen+16; y += 4 {
		if (y-firstRow)%stripeRows == 0 {
			if err := canceled(ctx, "resize"); err != nil {
				return false, err
			}
		}
		a := hquadAVX2(&out.Pix[3*outW*(y-firstRow)], 3*outW, &src.row(y)[0], src.stride, &bounds[0], &k[0], outW, mask, bpp)
		opaque = opaque && a
	}
	for ; y < lastRow; y++ {
		in := src.row(y)
		if len(in) < rowLen+16 {
			pad := make([]uint8, rowLen+16)
			copy(pad, in[:rowLen])
			for i := rowLen; i < len(pad); i++ {
				pad[i] = 0xFF // opaque padding, read against zero coefficients
			}
			in = pad
		}
		a := hquadAVX2(&out.Pix[3*outW*(y-firstRow)], 0, &in[0], 0, &bounds[0], &k[0], outW, mask, bpp)
		opaque = opaque && a
	}
	if bpp == 4 && !opaque {
		// Something read was not opaque: maybe only bytes past the image's rows (a
		// sub-image), so decide on the rows themselves.
		for y := firstRow; y < lastRow; y++ {
			if !opaqueRow(src.row(y)[:rowLen]) {
				return false, nil
			}
		}
	}
	return true, nil
}

// quadTaps lays out the weights for hquadAVX2: for each output, its taps in fours (zero
// past the last), each four as 64 bytes: the int16 high parts (c>>11) of taps 0, 1 four
// times over, then of taps 2, 3 four times over; then the low parts (c&2047) the same
// way. bounds gets each output's first source byte (for bpp-byte pixels) and count of
// fours.
func quadTaps(wt weights, bounds []int32, bpp int) []int16 {
	total := 0
	for _, n := range wt.n {
		total += (n + 3) / 4
	}
	k := make([]int16, 32*total+32) // never empty, so &k[0] is valid
	q := 0
	for x, n := range wt.n {
		bounds[2*x], bounds[2*x+1] = int32(bpp*wt.first[x]), int32((n+3)/4)
		for t, c := range wt.k[x*wt.size : x*wt.size+n] {
			block := k[32*(q+t/4):]
			pos := 8*((t%4)/2) + t%2 // the half of the register, then the word of the pair
			for lane := range 4 {
				block[pos+2*lane] = int16(c >> 11)
				block[16+pos+2*lane] = int16(c & 2047)
			}
		}
		q += (n + 3) / 4
	}
	return k
}

// resampleColumns is the vertical pass. It sweeps whole rows per tap, which reads memory
// in order; integer sums do not depend on the order, so the result equals PIL's.
func resampleColumns(ctx context.Context, src *RGB, wt weights) (*RGB, error) {
	outH := len(wt.first)
	rowLen := 3 * src.W
	out := NewRGB(src.W, outH)
	done := 0 // leading bytes of each row the AVX2 kernel computes
	if useAVX2 {
		done = rowLen / 16 * 16
	}
	acc := make([]int32, rowLen-done)
	const half = int32(1) << (precisionBits - 1)
	for y := 0; y < outH; y++ {
		if y%stripeRows == 0 {
			if err := canceled(ctx, "resize"); err != nil {
				return nil, err
			}
		}
		lo, n := wt.first[y], wt.n[y]
		k := wt.k[y*wt.size : y*wt.size+n]
		if done > 0 {
			vrowAVX2(&out.Pix[rowLen*y], &src.Pix[rowLen*lo], rowLen, done/16, &k[0], n)
		}
		if len(acc) == 0 {
			continue
		}
		for i := range acc {
			acc[i] = half
		}
		for i, c := range k {
			row := src.Pix[rowLen*(lo+i)+done : rowLen*(lo+i+1)]
			row = row[:len(acc)]
			for x, p := range row {
				acc[x] += int32(p) * c
			}
		}
		dst := out.Pix[rowLen*y+done : rowLen*(y+1)]
		dst = dst[:len(acc)]
		for x, v := range acc {
			dst[x] = clip8(v)
		}
	}
	return out, nil
}
