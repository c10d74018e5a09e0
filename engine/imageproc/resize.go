package imageproc

import (
	"fmt"
	"math"
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
	if w <= 0 || h <= 0 || w > MaxResizeSide || h > MaxResizeSide {
		return nil, fmt.Errorf("resize: target %dx%d out of range 1..%d", w, h, MaxResizeSide)
	}
	if w == src.W && h == src.H {
		out := NewRGB(w, h)
		copy(out.Pix, src.Pix)
		return out, nil
	}
	cur := src
	vert := pilWeights(src.H, h)
	if w != src.W {
		// Only the rows the vertical pass reads are resampled, as PIL does.
		firstRow := vert.first[0]
		lastRow := vert.first[h-1] + vert.n[h-1]
		cur = resampleRows(cur, pilWeights(src.W, w), firstRow, lastRow)
		for i := range vert.first {
			vert.first[i] -= firstRow
		}
	}
	if h != src.H {
		cur = resampleColumns(cur, vert)
	}
	return cur, nil
}

// resampleRows is the horizontal pass over source rows [firstRow, lastRow).
func resampleRows(src *RGB, wt weights, firstRow, lastRow int) *RGB {
	outW := len(wt.first)
	out := NewRGB(outW, lastRow-firstRow)
	const half = int32(1) << (precisionBits - 1)
	for y := firstRow; y < lastRow; y++ {
		in := src.Pix[3*src.W*y : 3*src.W*(y+1)]
		dst := out.Pix[3*outW*(y-firstRow) : 3*outW*(y-firstRow+1)]
		for x := 0; x < outW; x++ {
			lo, n := wt.first[x], wt.n[x]
			k := wt.k[x*wt.size : x*wt.size+n]
			px := in[3*lo : 3*(lo+n)]
			r, g, b := half, half, half
			for i, c := range k {
				p := px[3*i : 3*i+3 : 3*i+3]
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

// resampleColumns is the vertical pass. It sweeps whole rows per tap, which reads memory
// in order; integer sums do not depend on the order, so the result equals PIL's.
func resampleColumns(src *RGB, wt weights) *RGB {
	outH := len(wt.first)
	rowLen := 3 * src.W
	out := NewRGB(src.W, outH)
	acc := make([]int32, rowLen)
	const half = int32(1) << (precisionBits - 1)
	for y := 0; y < outH; y++ {
		lo, n := wt.first[y], wt.n[y]
		k := wt.k[y*wt.size : y*wt.size+n]
		for i := range acc {
			acc[i] = half
		}
		for i, c := range k {
			row := src.Pix[rowLen*(lo+i) : rowLen*(lo+i+1)]
			row = row[:len(acc)]
			for x, p := range row {
				acc[x] += int32(p) * c
			}
		}
		dst := out.Pix[rowLen*y : rowLen*(y+1)]
		dst = dst[:len(acc)]
		for x, v := range acc {
			dst[x] = clip8(v)
		}
	}
	return out
}
