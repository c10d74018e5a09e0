package imageproc

import "image"

// Lossy WebP colour, the way libwebp produces it for PIL.
//
// golang.org/x/image/webp returns a lossy picture as subsampled YCbCr planes, and Go's
// image.YCbCr converts them with the full-range JPEG (JFIF) matrix. VP8 stores
// limited-range BT.601 (Y in 16..235), which libwebp converts with its own 14-bit fixed
// point after a "fancy" bilinear chroma upsampling. Left to Go, colours come out about 20
// levels off; decoding the planes here the libwebp way brings them within a level or two.

// webpToNRGBA converts a lossy WebP picture (4:2:0, anchored at the origin) to NRGBA,
// keeping alpha when there is any.
func webpToNRGBA(m *image.YCbCr, alpha []uint8, alphaStride int) *image.NRGBA {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	out := image.NewNRGBA(image.Rect(0, 0, w, h))
	cw, ch := (w+1)/2, (h+1)/2
	u := make([]uint8, w)
	v := make([]uint8, w)
	for y := 0; y < h; y++ {
		near, far := webpChromaRows(y, ch)
		webpChromaRow(u, m.Cb[near*m.CStride:near*m.CStride+cw], m.Cb[far*m.CStride:far*m.CStride+cw])
		webpChromaRow(v, m.Cr[near*m.CStride:near*m.CStride+cw], m.Cr[far*m.CStride:far*m.CStride+cw])
		ys := m.Y[y*m.YStride : y*m.YStride+w]
		dst := out.Pix[y*out.Stride : y*out.Stride+4*w]
		for x, yv := range ys {
			Y := int(yv)
			d := dst[4*x : 4*x+4 : 4*x+4]
			d[0] = webpClip8(mulHi(Y, 19077) + mulHi(int(v[x]), 26149) - 14234)
			d[1] = webpClip8(mulHi(Y, 19077) - mulHi(int(u[x]), 6419) - mulHi(int(v[x]), 13320) + 8708)
			d[2] = webpClip8(mulHi(Y, 19077) + mulHi(int(u[x]), 33050) - 17685)
			d[3] = 255
			if alpha != nil {
				d[3] = alpha[y*alphaStride+x]
			}
		}
	}
	return out
}

// webpChromaRows names, for output row y, the chroma row it leans towards (weight 3/4
// vertically) and the other one (1/4). The first row, and the last row of an even-height
// picture, use one chroma row only, as libwebp's EmitFancyRGB does.
func webpChromaRows(y, ch int) (near, far int) {
	switch {
	case y == 0:
		return 0, 0
	case y%2 == 1:
		near, far = (y-1)/2, (y+1)/2
		if far >= ch {
			far = near
		}
		return near, far
	default:
		return y / 2, y/2 - 1
	}
}

// webpChromaRow is one output row of libwebp's UpsampleRgbLinePair: the chroma of pixel
// 2x-1 and 2x interpolates the 2x2 neighbourhood of chroma samples x-1, x in the near and
// far rows with weights 9:3:3:1, through the same two-step rounding libwebp uses.
func webpChromaRow(dst, near, far []uint8) {
	w := len(dst)
	dst[0] = uint8((3*int(near[0]) + int(far[0]) + 2) >> 2)
	last := (w - 1) >> 1
	for x := 1; x <= last; x++ {
		tl, t := int(near[x-1]), int(near[x])
		l, c := int(far[x-1]), int(far[x])
		avg := tl + t + l + c + 8
		diag12 := (avg + 2*(t+l)) >> 3
		diag03 := (avg + 2*(tl+c)) >> 3
		dst[2*x-1] = uint8((diag12 + tl) >> 1)
		dst[2*x] = uint8((diag03 + t) >> 1)
	}
	if w%2 == 0 {
		dst[w-1] = uint8((3*int(near[last]) + int(far[last]) + 2) >> 2)
	}
}

func mulHi(v, coeff int) int { return (v * coeff) >> 8 }

// webpClip8 is libwebp's VP8Clip8: values carry 6 fractional bits.
func webpClip8(v int) uint8 {
	const fix = 6
	if v&^((256<<fix)-1) == 0 {
		return uint8(v >> fix)
	}
	if v < 0 {
		return 0
	}
	return 255
}

// webpColours replaces a lossy WebP decode by its libwebp colours; other images pass.
func webpColours(img image.Image) image.Image {
	switch m := img.(type) {
	case *image.YCbCr:
		if m.SubsampleRatio == image.YCbCrSubsampleRatio420 && m.Rect.Min == (image.Point{}) {
			return webpToNRGBA(m, nil, 0)
		}
	case *image.NYCbCrA:
		if m.SubsampleRatio == image.YCbCrSubsampleRatio420 && m.Rect.Min == (image.Point{}) {
			return webpToNRGBA(&m.YCbCr, m.A, m.AStride)
		}
	}
	return img
}
