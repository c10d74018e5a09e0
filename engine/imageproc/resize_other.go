//go:build !amd64

package imageproc

// useAVX2 is false off amd64: the scalar Go code does the resize.
var useAVX2 = false

func vrowAVX2(dst, src *byte, stride, blocks int, k *int32, n int) {
	panic("imageproc: no AVX2 kernels on this architecture")
}

func hquadAVX2(dst *byte, dstStride int, src *byte, srcStride int, bounds *int32, k *int16, outW int, mask *byte, bpp int) (alpha255 bool) {
	panic("imageproc: no AVX2 kernels on this architecture")
}

func quadMask(bpp int) *byte { return nil }
