package native

// The engine's own figures for `worker bench` (package bench): which decode kernels this
// CPU gets and how fast they stream weights. The machine's figures (memory bandwidth,
// OpenBLAS sgemm) are measured in bench/machine, outside the engine.

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

// KernelISA names the decode kernels the CPU backend picks on this machine ("avx512",
// "avx2" or "generic"). It describes the engine, not the machine: `worker bench` prints it
// next to the machine's own figures, which live in bench/machine.
func KernelISA() string { return C.GoString(C.cpu_kernel_isa()) }

// AMXAvailable says whether this CPU and kernel run the CPU backend's AMX products
// (matmul=amx: bf16 tiles and AVX512-BF16, and Linux's permission for the tile state, which
// this asks for on the process's behalf). MatmulAMX.Available says the same.
func AMXAvailable() bool { return C.cpu_amx_available() != 0 }

// MeasureMatvec times the engine's decode kernels alone, on the engine's own thread pool
// and work split: y = W x over mats distinct bf16 matrices of [rows, cols] stored back to
// back (freshly allocated, so cold in cache once they exceed it), on threads threads
// (0 = one per CPU), best of reps. It returns GB/s of weights read, the figure to hold
// against the machine's memory bandwidth (bench/machine.MemoryBandwidth). It lives here,
// not with the machine probes, because it measures the engine's code; nothing in
// inference calls it.
func MeasureMatvec(rows, cols, mats, threads, reps int) (float64, error) {
	return measureMatvec(C.LA_DTYPE_BF16, rows, cols, mats, threads, reps)
}

// MeasureMatvecQ8 is MeasureMatvec on int8 weights (LA_WEIGHTS_QUANT=q8's format; cols a
// multiple of 32), GB/s of the int8 rows and their scales.
func MeasureMatvecQ8(rows, cols, mats, threads, reps int) (float64, error) {
	if cols%C.CPU_Q8_BLOCK != 0 {
		return 0, fmt.Errorf("matvec: q8 rows of %d weights, want a multiple of %d", cols, C.CPU_Q8_BLOCK)
	}
	return measureMatvec(C.CPU_DTYPE_Q8, rows, cols, mats, threads, reps)
}

func measureMatvec(dtype C.la_dtype, rows, cols, mats, threads, reps int) (float64, error) {
	if rows <= 0 || cols <= 0 || mats <= 0 || threads < 0 || reps <= 0 {
		return 0, fmt.Errorf("matvec: rows %d, cols %d, mats %d, threads %d, reps %d", rows, cols, mats, threads, reps)
	}
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	n := C.size_t(rows) * C.cpu_row_bytes(dtype, C.int(cols)) * C.size_t(mats) // bytes
	w := (*C.uint8_t)(C.malloc(n))
	x := (*C.float)(C.malloc(C.size_t(cols) * 4))
	y := (*C.float)(C.malloc(C.size_t(rows) * 4))
	defer C.free(unsafe.Pointer(w))
	defer C.free(unsafe.Pointer(x))
	defer C.free(unsafe.Pointer(y))
	if w == nil || x == nil || y == nil {
		return 0, fmt.Errorf("matvec: out of memory for %d MB of weights", n>>20)
	}
	ws := unsafe.Slice((*uint16)(unsafe.Pointer(w)), int(n/2))
	for i := range ws {
		// small bf16 values; as q8 rows, scales of about 0.007 and quants in -61..60
		ws[i] = uint16(0x3c00 + i%97)
	}
	xs := unsafe.Slice((*float32)(unsafe.Pointer(x)), cols)
	for i := range xs {
		xs[i] = float32(i%13) * 0.01
	}
	errBuf := (*C.char)(C.calloc(C.LA_ERR_LEN, 1))
	defer C.free(unsafe.Pointer(errBuf))
	var g C.double
	if C.cpu_matvec_gbps(unsafe.Pointer(w), dtype, C.int(rows), C.int(cols), C.int(mats), x, y,
		C.int(threads), C.int(reps), &g, errBuf, C.LA_ERR_LEN) != 0 {
		return 0, fmt.Errorf("matvec: %s", C.GoString(errBuf))
	}
	return float64(g), nil
}
