//go:build !amd64

package imageproc

// useAVX2 is false off amd64: the scalar Go code does the resize.
var useAVX2 = false

func hrowAVX2(dst, src *byte, bounds *int32, k *int32, outW, ksize, bpp int) {
	panic("imageproc: no AVX2 kernels on this architecture")
}

func vrowAVX2(dst, src *byte, stride, blocks int, k *int32, n int) {
	panic("imageproc: no AVX2 kernels on this architecture")
}

func hrow4AVX2(dst, src *byte, bounds *int32, k *int32, outW int) {
	panic("imageproc: no AVX2 kernels on this architecture")
}

func hrow4x4AVX2(dst *byte, dstStride int, src *byte, srcStride int, bounds *int32, k *int32, outW int) {
	panic("imageproc: no AVX2 kernels on this architecture")
}
