package imageproc

import (
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
	return resizePlane(src.plane(), w, h)
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

// rgb copies the plane into an RGB image.
func (p plane) rgb() *RGB {
	out := NewRGB(p.w, p.h)
	for y := 0; y < p.h; y++ {
		src, dst := p.row(y), out.Pix[3*p.w*y:3*p.w*(y+1)]
		if p.bpp == 3 {
			copy(dst, src)
			continue
		}
		for x := 0; x < p.w; x++ {
			d, s := dst[3*x:3*x+3:3*x+3], src[4*x:4*x+3:4*x+3]
			d[0], d[1], d[2] = s[0], s[1], s[2]
		}
	}
	return out
}

// resizePlane is ResizeBicubic on any plane; the result is RGB.
func resizePlane(src plane, w, h int) (*RGB, error) {
	if w <= 0 || h <= 0 || w > MaxResizeSide || h > MaxResizeSide {
		return nil, fmt.Errorf("resize: target %dx%d out of range 1..%d", w, h, MaxResizeSide)
	}
	if w == src.w && h == src.h {
		return src.rgb(), nil
	}
	vert := pilWeights(src.h, h)
	var cur *RGB
	if w != src.w {
		// Only the rows the vertical pass reads are resampled, as PIL does.
		firstRow := vert.first[0]
		lastRow := vert.first[h-1] + vert.n[h-1]
		cur = resampleRows(src, pilWeights(src.w, w), firstRow, lastRow, h != src.h)
		for i := range vert.first {
			vert.first[i] -= firstRow
		}
	} else {
		cur = src.rgb()
	}
	if h != src.h {
		tmp := cur
		cur = resampleColumns(cur, vert)
		if w != src.w {
			scratch.Put(&tmp.Pix)
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
func resampleRows(src plane, wt weights, firstRow, lastRow int, intermediate bool) *RGB {
	outW := len(wt.first)
	var out *RGB
	if intermediate {
		out = scratchRGB(outW, lastRow-firstRow)
	} else {
		out = NewRGB(outW, lastRow-firstRow)
	}
	if useAVX2 {
		resampleRowsAVX2(out, src, wt, firstRow, lastRow)
		return out
	}
	const half = int32(1) << (precisionBits - 1)
	bpp := src.bpp
	for y := firstRow; y < lastRow; y++ {
		in := src.row(y)[:bpp*src.w]
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
	return out
}

// resampleRowsAVX2 is resampleRows with the AVX2 kernels, one row at a time. The
// kernels read up to 8 bytes past a row's last pixel (a 3-byte pixel is read as 4, and
// the 4-byte kernel takes taps in pairs, the odd one out against a zero coefficient):
// bytes of the next row, except after the plane's last row, which is read from a copy.
func resampleRowsAVX2(out *RGB, src plane, wt weights, firstRow, lastRow int) {
	outW := len(wt.first)
	bounds := make([]int32, 2*outW)
	var k []int32
	if src.bpp == 4 {
		k = pairTaps(wt, bounds)
	} else {
		for x := range outW {
			bounds[2*x], bounds[2*x+1] = int32(3*wt.first[x]), int32(wt.n[x])
		}
		k = wt.k
	}
	rowLen := src.bpp * src.w
	y := firstRow
	if src.bpp == 4 { // four rows at a time while the fourth has its 8 bytes after it
		for ; y+4 <= lastRow && len(src.row(y+3)) >= rowLen+8; y += 4 {
			hrow4x4AVX2(&out.Pix[3*outW*(y-firstRow)], 3*outW, &src.row(y)[0], src.stride, &bounds[0], &k[0], outW)
		}
	}
	for ; y < lastRow; y++ {
		in := src.row(y)
		if len(in) < rowLen+8 {
			in = append(make([]uint8, 0, rowLen+8), in[:rowLen]...)[:rowLen+8]
		}
		dst := &out.Pix[3*outW*(y-firstRow)]
		if src.bpp == 4 {
			hrow4AVX2(dst, &in[0], &bounds[0], &k[0], outW)
		} else {
			hrowAVX2(dst, &in[0], &bounds[0], &k[0], outW, wt.size, 3)
		}
	}
}

// pairTaps lays out the weights for hrow4AVX2: for each output, its taps in pairs, each
// pair eight int32 (the first coefficient four times, then the second, zero past the
// last tap), one after the other; bounds gets each output's first byte and pair count.
func pairTaps(wt weights, bounds []int32) []int32 {
	total := 0
	for _, n := range wt.n {
		total += (n + 1) / 2
	}
	k := make([]int32, 8*total+8) // never empty, so &k[0] is valid
	i := 0
	for x, n := range wt.n {
		bounds[2*x], bounds[2*x+1] = int32(4*wt.first[x]), int32((n+1)/2)
		for t, c := range wt.k[x*wt.size : x*wt.size+n] {
			at := 8*(i+t/2) + 4*(t%2)
			k[at], k[at+1], k[at+2], k[at+3] = c, c, c, c
		}
		i += (n + 1) / 2
	}
	return k
}

// resampleColumns is the vertical pass. It sweeps whole rows per tap, which reads memory
// in order; integer sums do not depend on the order, so the result equals PIL's.
func resampleColumns(src *RGB, wt weights) *RGB {
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
	return out
}
