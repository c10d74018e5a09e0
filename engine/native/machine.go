package native

/*
#include <stdlib.h>
#include "cpu_internal.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// MeasureMemoryBandwidth runs STREAM-style copy and triad over three arrays of mib MiB
// each on threads threads (0 = one per CPU), best of reps, and returns GB/s.
func MeasureMemoryBandwidth(mib, threads, reps int) (copyGBps, triadGBps float64, err error) {
	if mib <= 0 || threads < 0 || reps <= 0 {
		return 0, 0, fmt.Errorf("memory bandwidth: size %d MiB, threads %d, reps %d", mib, threads, reps)
	}
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	errBuf := (*C.char)(C.calloc(C.LA_ERR_LEN, 1))
	defer C.free(unsafe.Pointer(errBuf))
	var cp, triad C.double
	if C.cpu_stream(C.size_t(mib)<<20, C.int(threads), C.int(reps), &cp, &triad, errBuf, C.LA_ERR_LEN) != 0 {
		return 0, 0, fmt.Errorf("memory bandwidth: %s", C.GoString(errBuf))
	}
	return float64(cp), float64(triad), nil
}

// MeasureSGEMM times OpenBLAS cblas_sgemm on [m, k] x [n, k]^T (a prefill projection's
// shape), best of reps after one warm-up, and returns GFLOP/s.
func MeasureSGEMM(m, n, k, reps int) (float64, error) {
	errBuf := (*C.char)(C.calloc(C.LA_ERR_LEN, 1))
	defer C.free(unsafe.Pointer(errBuf))
	var g C.double
	if C.cpu_sgemm_gflops(C.int(m), C.int(n), C.int(k), C.int(reps), &g, errBuf, C.LA_ERR_LEN) != 0 {
		return 0, fmt.Errorf("sgemm: %s", C.GoString(errBuf))
	}
	return float64(g), nil
}

// KernelISA names the decode kernels the CPU backend picks on this machine.
func KernelISA() string { return C.GoString(C.cpu_kernel_isa()) }
