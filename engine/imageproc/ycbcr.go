package imageproc

import "image"

// JPEG colour, the way libjpeg(-turbo) produces it for PIL.
//
// Go's image/jpeg hands back the decoded planes with the chroma still subsampled and its
// own colour conversion replicates each chroma sample over its block. libjpeg, which PIL
// decodes with, instead interpolates the chroma ("fancy upsampling", a triangle filter,
// on by default) and converts with its own fixed-point tables. Doing the same here brings
// Go's decode to within the IDCT's rounding of PIL's (see docs/images.md for the measured
// difference) instead of several levels off along every colour edge.

// ycc holds libjpeg's YCbCr -> RGB tables (jdcolor.c, build_ycc_rgb_table): 16 fractional
// bits, Cr->R and Cb->B rounded to integers, the two G terms kept scaled with the
// rounding half folded into the Cb term.
type ycc struct {
	crR, cbB [256]int32
	crG, cbG [256]int32
}

const yccScaleBits = 16

var yccTables = newYCC() // read-only after package initialisation

func newYCC() *ycc {
	fix := func(x float64) int64 { return int64(x*(1<<yccScaleBits) + 0.5) }
	const half = int64(1) << (yccScaleBits - 1)
	t := &ycc{}
	for i := 0; i < 256; i++ {
		x := int64(i - 128)
		t.crR[i] = int32((fix(1.40200)*x + half) >> yccScaleBits)
		t.cbB[i] = int32((fix(1.77200)*x + half) >> yccScaleBits)
		t.crG[i] = int32(-fix(0.71414) * x)
		t.cbG[i] = int32(-fix(0.34414)*x + half)
	}
	return t
}

// ycbcrToRGB converts a decoded JPEG (or lossy WebP) anchored at the origin.
func ycbcrToRGB(out *RGB, m *image.YCbCr) {
	w, h := out.W, out.H
	// Rows are one sample longer than the image when its width is odd: the upsamplers
	// always write whole output pairs.
	cb := make([]uint8, w+1)
	cr := make([]uint8, w+1)
	up := newChromaUpsampler(m, w, h)
	t := yccTables
	for y := 0; y < h; y++ {
		up.row(cb, m.Cb, y)
		up.row(cr, m.Cr, y)
		ys := m.Y[y*m.YStride : y*m.YStride+w]
		dst := out.Pix[3*y*w : 3*(y+1)*w]
		for x, yv := range ys {
			Y := int32(yv)
			b, r := cb[x], cr[x]
			dst[3*x] = clamp8(Y + t.crR[r])
			dst[3*x+1] = clamp8(Y + (t.cbG[b]+t.crG[r])>>yccScaleBits)
			dst[3*x+2] = clamp8(Y + t.cbB[b])
		}
	}
}

func clamp8(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// chromaUpsampler produces one full-resolution chroma row at a time.
type chromaUpsampler struct {
	m      *image.YCbCr
	w      int
	cw, ch int     // chroma plane size libjpeg uses (downsampled_width/height)
	hs, vs int     // 1 or 2; 0 for layouts without a fancy path (4:1:1, 4:1:0)
	colsum []int32 // h?v2: chroma columns with the vertical 3:1 weights applied
}

func newChromaUpsampler(m *image.YCbCr, w, h int) *chromaUpsampler {
	u := &chromaUpsampler{m: m, w: w}
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		u.hs, u.vs = 1, 1
	case image.YCbCrSubsampleRatio422:
		u.hs, u.vs = 2, 1
	case image.YCbCrSubsampleRatio420:
		u.hs, u.vs = 2, 2
	case image.YCbCrSubsampleRatio440:
		u.hs, u.vs = 1, 2
	}
	if u.hs == 0 {
		return u
	}
	u.cw = (w + u.hs - 1) / u.hs
	u.ch = (h + u.vs - 1) / u.vs
	u.colsum = make([]int32, u.cw)
	return u
}

// row writes the chroma of image row y into dst (len >= w+1; the first w count).
func (u *chromaUpsampler) row(dst, plane []uint8, y int) {
	m := u.m
	if u.hs == 0 { // no fancy path: replicate, as Go's own conversion does
		for x := range dst[:u.w] {
			dst[x] = plane[m.COffset(x, y)]
		}
		return
	}
	cy := y / u.vs
	cur := plane[cy*m.CStride : cy*m.CStride+u.cw]
	if u.vs == 1 {
		if u.hs == 1 {
			copy(dst, cur)
			return
		}
		h2v1(dst, cur)
		return
	}
	// Vertical triangle: 3/4 of the nearer chroma row plus 1/4 of the next nearer one
	// (the row above for the upper output row, below for the lower), edges replicated.
	ny := cy - 1
	if y%2 == 1 {
		ny = cy + 1
	}
	ny = min(max(ny, 0), u.ch-1)
	near := plane[ny*m.CStride : ny*m.CStride+u.cw]
	for x := range u.colsum {
		u.colsum[x] = 3*int32(cur[x]) + int32(near[x])
	}
	if u.hs == 1 { // h1v2_fancy_upsample: bias 1 above, 2 below
		bias := int32(1)
		if y%2 == 1 {
			bias = 2
		}
		for x, v := range u.colsum {
			dst[x] = uint8((v + bias) >> 2)
		}
		return
	}
	h2v2(dst, u.colsum)
}

// h2v1 is libjpeg's h2v1_fancy_upsample: each output pair leans 3:1 towards its own
// sample, the left output rounding with bias 1 and the right with 2; the first and last
// outputs copy the edge samples. It writes 2*len(in) outputs.
func h2v1(dst, in []uint8) {
	n := len(in)
	dst = dst[:2*n]
	if n == 1 {
		dst[0], dst[1] = in[0], in[0]
		return
	}
	dst[0] = in[0]
	dst[1] = uint8((3*int32(in[0]) + int32(in[1]) + 2) >> 2)
	for i := 1; i < n-1; i++ {
		v := 3 * int32(in[i])
		dst[2*i] = uint8((v + int32(in[i-1]) + 1) >> 2)
		dst[2*i+1] = uint8((v + int32(in[i+1]) + 2) >> 2)
	}
	last := n - 1
	dst[2*last] = uint8((3*int32(in[last]) + int32(in[last-1]) + 1) >> 2)
	dst[2*last+1] = in[last]
}

// h2v2 is the horizontal half of libjpeg's h2v2_fancy_upsample, on column sums that
// already carry the vertical 3:1 weights (so the total weight is 16). It writes
// 2*len(sum) outputs.
func h2v2(dst []uint8, sum []int32) {
	n := len(sum)
	dst = dst[:2*n]
	if n == 1 {
		v := uint8((sum[0]*4 + 8) >> 4)
		dst[0], dst[1] = v, v
		return
	}
	dst[0] = uint8((sum[0]*4 + 8) >> 4)
	dst[1] = uint8((sum[0]*3 + sum[1] + 7) >> 4)
	for i := 1; i < n-1; i++ {
		dst[2*i] = uint8((sum[i]*3 + sum[i-1] + 8) >> 4)
		dst[2*i+1] = uint8((sum[i]*3 + sum[i+1] + 7) >> 4)
	}
	last := n - 1
	dst[2*last] = uint8((sum[last]*3 + sum[last-1] + 8) >> 4)
	dst[2*last+1] = uint8((sum[last]*4 + 7) >> 4)
}
