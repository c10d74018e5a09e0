package imageproc

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly kernels of resize_amd64.s; tests turn it off to compare
// them with the scalar Go code.
var useAVX2 = cpu.X86.HasAVX2

//go:noescape
func vrowAVX2(dst, src *byte, stride, blocks int, k *int32, n int)

//go:noescape
func hquadAVX2(dst *byte, dstStride int, src *byte, srcStride int, bounds *int32, k *int16, outW int, mask *byte, bpp int) (alpha255 bool)

// quadMask is hquadAVX2's byte shuffle for 3- or 4-byte pixels.
func quadMask(bpp int) *byte
