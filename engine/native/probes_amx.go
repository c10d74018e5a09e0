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

// amxGemmProbe runs the AMX product (cpu_amx.c) once on its own pool of threads, for
// tests: y[n, rows] = bf16(x[n, cols]) bf16(W[rows, cols])^T, W given as raw rows of dtype
// (q8dtype included). Not part of the package's API.
func amxGemmProbe(dtype checkpoint.DType, w []byte, rows, cols int, x []float32, n, threads int) ([]float32, error) {
	y := make([]float32, n*rows)
	rc := C.cpu_amx_gemm_probe(C.la_dtype(dtype), unsafe.Pointer(unsafe.SliceData(w)), C.int(rows), C.int(cols),
		(*C.float)(unsafe.SliceData(x)), C.int(n), (*C.float)(unsafe.SliceData(y)), C.int(threads))
	if rc != 0 {
		return nil, fmt.Errorf("amx probe: rc %d", int(rc))
	}
	return y, nil
}
