package imageproc

import (
	"bytes"
	"image"
	"image/color"
	"math/rand/v2"
	"testing"
)

// TestResizeKernelsMatchScalar: the AVX2 kernels give the scalar Go code's bytes for RGB
// and opaque RGBA sources (rows padded or not), for shrinks and stretches of every
// ratio, tiny sizes and the widths that leave tails, and for sizes whose horizontal pass
// reads the last source row (the copy with room after it).
func TestResizeKernelsMatchScalar(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this machine: only the scalar code runs")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := [][4]int{
		{1, 1, 1, 5}, {1, 1, 7, 1}, {2, 3, 1, 1}, {5, 4, 17, 9}, {17, 9, 5, 4},
		{1920, 1080, 598, 336}, {598, 336, 616, 336}, {600, 450, 532, 392}, {37, 23, 56, 28},
		{300, 1, 308, 28}, {1, 300, 28, 308}, {2000, 30, 2016, 56}, {40, 1500, 28, 812},
		{33, 2, 56, 28}, {1000, 7, 3, 2}, {7, 1000, 2, 3}, {129, 65, 128, 64},
	}
	for range 40 {
		sizes = append(sizes, [4]int{1 + rng.IntN(300), 1 + rng.IntN(200), 1 + rng.IntN(300), 1 + rng.IntN(200)})
	}
	for _, sz := range sizes {
		sw, sh, dw, dh := sz[0], sz[1], sz[2], sz[3]
		rgb := NewRGB(sw, sh)
		for i := range rgb.Pix {
			rgb.Pix[i] = uint8(rng.Uint32())
		}
		// The same pixels as an opaque RGBA image inside a larger one (stride > 4*w).
		big := image.NewRGBA(image.Rect(0, 0, sw+3, sh+2))
		for i := range big.Pix {
			big.Pix[i] = 0xFF
		}
		for y := 0; y < sh; y++ {
			for x := 0; x < sw; x++ {
				copy(big.Pix[big.PixOffset(x+1, y+2):][:3], rgb.Pix[3*(y*sw+x):])
			}
		}
		rgba := plane{pix: big.Pix[big.PixOffset(1, 2):], w: sw, h: sh, stride: big.Stride, bpp: 4}
		for _, src := range []plane{rgb.plane(), rgba} {
			useAVX2 = false
			want, err := resizePlane(t.Context(), src, dw, dh)
			useAVX2 = true
			if err != nil {
				t.Fatal(err)
			}
			got, err := resizePlane(t.Context(), src, dw, dh)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Pix, want.Pix) {
				t.Fatalf("%dx%d -> %dx%d from %d-byte pixels: AVX2 and scalar differ", sw, sh, dw, dh, src.bpp)
			}
		}
	}
}

// TestModelViewRGBA: ModelView reads an opaque *image.RGBA (a decoded JPEG) in place and
// gives what converting it with ToRGB first gives; one with alpha anywhere in the rows the
// resize reads, or in a stretch without a horizontal pass, falls back to ToRGB (blended
// onto white). Both with the AVX2 kernels and without.
func TestModelViewRGBA(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	o := DefaultOptions()
	o.InTokenLimit, o.CanonGrid = 64, [2]int{}
	for _, sz := range [][2]int{{300, 200}, {28, 50}, {13, 7}, {1, 1}} {
		for _, alphaAt := range [][2]int{{-1, -1}, {0, 0}, {sz[0] - 1, sz[1] - 1}} {
			full := image.NewRGBA(image.Rect(0, 0, sz[0]+2, sz[1]+1))
			for i := range full.Pix {
				full.Pix[i] = uint8(rng.Uint32())
				if i%4 == 3 {
					full.Pix[i] = 0xFF
				}
			}
			m := full.SubImage(image.Rect(1, 1, sz[0]+1, sz[1]+1)).(*image.RGBA)
			if alphaAt[0] >= 0 {
				m.SetRGBA(alphaAt[0]+1, alphaAt[1]+1, color.RGBA{10, 20, 30, 40})
			}
			for _, avx := range []bool{false, useAVX2} {
				saved := useAVX2
				useAVX2 = avx
				got, err := ModelView(m, o)
				rgb, _ := ToRGB(m)
				want, err2 := ModelViewRGB(rgb, o)
				useAVX2 = saved
				if err != nil || err2 != nil {
					t.Fatalf("%v alpha at %v: %v / %v", sz, alphaAt, err, err2)
				}
				if !bytes.Equal(got.Pix, want.Pix) {
					t.Errorf("%v alpha at %v (AVX2 %v): ModelView differs from ToRGB + ModelViewRGB", sz, alphaAt, avx)
				}
			}
		}
	}
}
