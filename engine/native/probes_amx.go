package native

/*
#include "cpu_internal.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/locateanything/detect/engine/checkpoint"
)

// bf16GemmProbe runs the bf16 product of kind m (amx or avx512bf16: cpu_amx.c,
// cpu_avx512bf16.c) reps times on its own pool of threads, for tests and benchmarks:
// y[n, rows] = bf16(x[n, cols]) bf16(W[rows, cols])^T, or with split (option
// split_activations) (bf16(x) + bf16(x - bf16(x))) bf16(W)^T, W given as raw rows of dtype
// (q8dtype included), and the shortest run in seconds. Not part of the package's API.
func bf16GemmProbe(m Matmul, split bool, dtype checkpoint.DType, w []byte, rows, cols int, x []float32, n, threads, reps int) ([]float32, float64, error) {
	var kind C.cpu_matmul
	switch m {
	case MatmulAMX:
		kind = C.CPU_MATMUL_AMX
	case MatmulAVX512BF16:
		kind = C.CPU_MATMUL_AVX512BF16
	default:
		return nil, 0, fmt.Errorf("bf16 probe: matmul %q has no bf16 products", m)
	}
	y := make([]float32, n*rows)
	var best C.double
	splitArg := C.int(0)
	if split {
		splitArg = 1
	}
	rc := C.cpu_amx_gemm_probe(kind, splitArg, C.la_dtype(dtype), unsafe.Pointer(unsafe.SliceData(w)), C.int(rows), C.int(cols),
		(*C.float)(unsafe.SliceData(x)), C.int(n), (*C.float)(unsafe.SliceData(y)), C.int(threads), C.int(reps), &best)
	if rc != 0 {
		return nil, 0, fmt.Errorf("%s probe: rc %d", m, int(rc))
	}
	return y, float64(best), nil
}

// sgemmProbe times the same product as matmul=f32 runs it: cblas_sgemm on W widened to
// float32 beforehand (the widening not timed); the shortest of reps runs in seconds.
func sgemmProbe(dtype checkpoint.DType, w []byte, rows, cols int, x []float32, n, reps int) ([]float32, float64, error) {
	y := make([]float32, n*rows)
	var best C.double
	rc := C.cpu_sgemm_probe(C.la_dtype(dtype), unsafe.Pointer(unsafe.SliceData(w)), C.int(rows), C.int(cols),
		(*C.float)(unsafe.SliceData(x)), C.int(n), (*C.float)(unsafe.SliceData(y)), C.int(reps), &best)
	if rc != 0 {
		return nil, 0, fmt.Errorf("sgemm probe: rc %d", int(rc))
	}
	return y, float64(best), nil
}
