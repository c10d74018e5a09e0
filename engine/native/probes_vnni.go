package native

/*
#include "cpu_internal.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// The VNNI prototype (cpu_vnni_probe.c), for BenchmarkVNNI only: not an engine path.

// vnniAvailable says whether the CPU has AVX512_VNNI (and AVX512_BF16, its comparison).
func vnniAvailable() bool { return C.cpu_vnni_available() != 0 }

// vnniMatvec runs the prototype's batch-1 product of one activation row (rounded to int8
// blocks) against mats q8 matrices [rows, cols] stored back to back in w, on threads
// threads, best of reps: y of the last matrix and GB/s of weights read.
func vnniMatvec(w []byte, rows, cols, mats int, x []float32, threads, reps int) ([]float32, float64, error) {
	y := make([]float32, rows)
	var g C.double
	if rc := C.cpu_vnni_matvec_gbps(unsafe.Pointer(unsafe.SliceData(w)), C.int(rows), C.int(cols), C.int(mats),
		(*C.float)(unsafe.SliceData(x)), (*C.float)(unsafe.SliceData(y)), C.int(threads), C.int(reps), &g); rc != 0 {
		return nil, 0, fmt.Errorf("vnni matvec probe: rc %d", int(rc))
	}
	return y, float64(g), nil
}

// vnniInnerGMACs times the two inner loops in L1 on one core: int8 x int8 with VPDPBUSD
// and per-block scales, and the AVX512_BF16 kernel's; G multiply-adds per second.
func vnniInnerGMACs(reps int) (vnni, bf16 float64, err error) {
	var v, b C.double
	if rc := C.cpu_vnni_inner_gmacs(C.int(reps), &v, &b); rc != 0 {
		return 0, 0, fmt.Errorf("vnni inner probe: rc %d", int(rc))
	}
	return float64(v), float64(b), nil
}
