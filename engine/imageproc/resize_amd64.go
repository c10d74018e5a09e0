package imageproc

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly kernels of resize_amd64.s; tests turn it off to compare
// them with the scalar Go code.
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func hrowAVX2(dst, src *byte, bounds *int32, k *int32, outW, ksize, bpp int)

//go:noescape
func vrowAVX2(dst, src *byte, stride, blocks int, k *int32, n int)

//go:noescape
func hrow4AVX2(dst, src *byte, bounds *int32, k *int32, outW int)

//go:noescape
func hrow4x4AVX2(dst *byte, dstStride int, src *byte, srcStride int, bounds *int32, k *int32, outW int)
