package native

/*
#include <stdlib.h>
#include "cpu_internal.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/locateanything/detect/engine/checkpoint"
)

// f32Product is one product of the exact path's kernels (cpu_gemm_f32.c) for the probe:
// y[i, j] = Alpha * sum over k of X[i*LdX+k] B(j, k), where B(j, k) is the element
// B[j*LdB+k] of raw rows of dtype DType (KN false: [N, K], a Linear weight) or B[k*LdB+j]
// (KN true: [K, N], attention's values). Y rows are LdY apart.
type f32Product struct {
	N, Cols, K int // rows of x, columns of y, the sum's length
	Alpha      float32
	X          []float32
	LdX        int
	B          []byte
	DType      checkpoint.DType
	LdB        int
	KN         bool
	LdY        int
}

// f32KernelLevel says whether this CPU runs the named level of the exact path's kernels
// (auto, avx512, avx2, plain, openblas): its C number, or an error saying why not.
func f32KernelLevel(name string) (int, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	switch l := int(C.cpu_f32_level_named(cs)); l {
	case -3:
		return 0, fmt.Errorf("f32 kernels %q: unknown level", name)
	case -2:
		return 0, fmt.Errorf("f32 kernels %q: this CPU lacks the instructions", name)
	default:
		return l, nil
	}
}

// f32KernelBest names the best level of the exact path's kernels this CPU runs.
func f32KernelBest() string { return C.GoString(C.cpu_f32_kernel_name()) }

// f32GemmProbe runs p at the named level on its own pool of threads reps times and
// returns y and the shortest run in seconds; smallRows < 0 keeps the engine's default
// row count for unpacked products. Level openblas runs cblas_sgemm on B widened to
// float32 beforehand (not timed), KN false only. Not part of the package's API.
func f32GemmProbe(level string, smallRows int, p f32Product, threads, reps int) ([]float32, float64, error) {
	l, err := f32KernelLevel(level)
	if err != nil {
		return nil, 0, err
	}
	if p.LdY < p.Cols || p.LdX < p.K || len(p.X) < (p.N-1)*p.LdX+p.K {
		return nil, 0, fmt.Errorf("f32 probe: x or y strides too short")
	}
	y := make([]float32, (p.N-1)*p.LdY+p.Cols)
	kn := 0
	if p.KN {
		kn = 1
	}
	c := C.cpu_f32_product{
		n: C.int(p.N), N: C.int(p.Cols), K: C.int(p.K), alpha: C.float(p.Alpha),
		ldx: C.size_t(p.LdX),
		b:   C.CBytes(p.B), b_dtype: C.la_dtype(p.DType), ldb: C.size_t(p.LdB), b_kn: C.int(kn),
		ldy: C.size_t(p.LdY),
	}
	defer C.free(c.b)
	cy := (*C.float)(C.malloc(C.size_t(len(y)) * 4))
	defer C.free(unsafe.Pointer(cy))
	c.y = cy
	cx := (*C.float)(C.malloc(C.size_t(len(p.X)) * 4))
	defer C.free(unsafe.Pointer(cx))
	copy(unsafe.Slice((*float32)(unsafe.Pointer(cx)), len(p.X)), p.X)
	c.x = cx
	var best C.double
	switch rc := C.cpu_f32_gemm_probe(C.int(l), C.int(smallRows), &c, C.int(threads), C.int(reps), &best); rc {
	case 0:
	case -1:
		return nil, 0, fmt.Errorf("f32 probe: level %s can not run this product here", level)
	default:
		return nil, 0, fmt.Errorf("f32 probe: out of memory")
	}
	copy(y, unsafe.Slice((*float32)(unsafe.Pointer(cy)), len(y)))
	return y, float64(best), nil
}
