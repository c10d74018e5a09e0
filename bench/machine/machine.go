// Package machine measures what the host offers, independently of the engine, so that
// `worker bench` can put each stage of the CPU backend next to its ceiling: memory
// bandwidth (STREAM-style copy and triad on plain pthreads) for decode, and OpenBLAS's
// sgemm rate for vision and prefill. Nothing here is linked into the worker's inference
// path; the figures that describe the engine itself (its decode kernels, its thread pool)
// stay in engine/native (KernelISA, MeasureMatvec).
package machine

/*
#cgo CFLAGS: -O3 -march=x86-64-v2 -std=c11 -D_GNU_SOURCE -Wall
#cgo LDFLAGS: -lopenblas -lm -lpthread
#include <stdlib.h>
#include "machine.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// errLen is the size of the buffer the C side writes its error message into.
const errLen = 256

// MemoryBandwidth runs STREAM-style copy and triad over three arrays of mib MiB each on
// threads threads (0 = one per CPU), best of reps, and returns GB/s as STREAM counts them
// (copy moves two arrays, triad three). Each thread first touches the slice it then
// streams, so its pages are local to it.
func MemoryBandwidth(mib, threads, reps int) (copyGBps, triadGBps float64, err error) {
	if mib <= 0 || threads < 0 || reps <= 0 {
		return 0, 0, fmt.Errorf("memory bandwidth: size %d MiB, threads %d, reps %d", mib, threads, reps)
	}
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	errBuf := (*C.char)(C.calloc(errLen, 1))
	defer C.free(unsafe.Pointer(errBuf))
	var cp, triad C.double
	if C.machine_stream(C.size_t(mib)<<20, C.int(threads), C.int(reps), &cp, &triad, errBuf, errLen) != 0 {
		return 0, 0, fmt.Errorf("memory bandwidth: %s", C.GoString(errBuf))
	}
	return float64(cp), float64(triad), nil
}

// SGEMM times OpenBLAS cblas_sgemm on [m, k] x [n, k]^T (a prefill projection's shape),
// best of reps after one warm-up, and returns GFLOP/s. OpenBLAS uses its own threads
// (OPENBLAS_NUM_THREADS), as it does inside the backend.
func SGEMM(m, n, k, reps int) (float64, error) {
	if m <= 0 || n <= 0 || k <= 0 || reps <= 0 {
		return 0, fmt.Errorf("sgemm: %dx%dx%d, reps %d: need positive sizes and repetitions", m, n, k, reps)
	}
	errBuf := (*C.char)(C.calloc(errLen, 1))
	defer C.free(unsafe.Pointer(errBuf))
	var g C.double
	if C.machine_sgemm(C.int(m), C.int(n), C.int(k), C.int(reps), &g, errBuf, errLen) != 0 {
		return 0, fmt.Errorf("%s", C.GoString(errBuf))
	}
	return float64(g), nil
}
