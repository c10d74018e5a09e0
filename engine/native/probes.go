package native

/*
#include "cpu_internal.h"
*/
import "C"

import (
	"unsafe"

	"github.com/locateanything/detect/engine/checkpoint"
)

// The probes below reach single C kernels so tests can check them in isolation; they are
// not part of the package's API.

// kernelSet picks the kernels a probe runs: the ones open selects on this CPU, the plain C
// ones, or the AVX2 ones a CPU without AVX-512 gets (NaN results and the name "none"
// where this CPU has no AVX2).
type kernelSet int

const (
	kernelsSelected kernelSet = C.CPU_KERNELS_SELECTED
	kernelsPlain    kernelSet = C.CPU_KERNELS_PLAIN
	kernelsAVX2     kernelSet = C.CPU_KERNELS_AVX2
)

// kernelSets are the sets the kernel tests compare.
var kernelSets = []kernelSet{kernelsSelected, kernelsPlain, kernelsAVX2}

func (k kernelSet) String() string {
	return [...]string{"selected", "plain C", "avx2"}[k]
}

// dotProbe computes the dot product of one weight row (raw little-endian elements of
// dtype) with x through the kernel set, and names the instruction set used.
func dotProbe(set kernelSet, dtype checkpoint.DType, row []byte, x []float32) (float32, string) {
	var isa *C.char
	r := C.cpu_dot_probe(C.int(set), C.la_dtype(dtype), unsafe.Pointer(unsafe.SliceData(row)),
		(*C.float)(unsafe.SliceData(x)), C.int(len(x)), &isa)
	return float32(r), C.GoString(isa)
}

// bicubicProbe resizes an [ih, iw, c] table to [oh, ow, c] with the backend's torch-style
// bicubic kernel.
func bicubicProbe(in []float32, ih, iw, c, oh, ow int) []float32 {
	out := make([]float32, oh*ow*c)
	C.cpu_bicubic_resize((*C.float)(unsafe.SliceData(in)), C.int(ih), C.int(iw), C.int(c),
		(*C.float)(unsafe.SliceData(out)), C.int(oh), C.int(ow))
	return out
}

// rowsProbe runs the batched matrix-vector kernel once: y[c*rows+r] = w[r] . x[c] for
// rows contiguous weight rows (raw little-endian elements of dtype) and len(x)/n
// activation rows of n floats, through the kernel set.
func rowsProbe(set kernelSet, dtype checkpoint.DType, w []byte, rows, n int, x []float32) []float32 {
	nx := len(x) / n
	y := make([]float32, rows*nx)
	C.cpu_rows_probe(C.int(set), C.la_dtype(dtype), unsafe.Pointer(unsafe.SliceData(w)), C.int(rows), C.int(n),
		(*C.float)(unsafe.SliceData(x)), C.int(nx), (*C.float)(unsafe.SliceData(y)))
	return y
}

// geluProbe and softmaxProbe run a set's vision GELU and attention softmax on a copy of x;
// ok is false when this CPU can not run the set.
func geluProbe(set kernelSet, x []float32) (y []float32, ok bool) {
	y = append([]float32(nil), x...)
	return y, C.cpu_activation_probe(C.int(set), 0, (*C.float)(unsafe.SliceData(y)), C.int(len(y))) == 0
}

func softmaxProbe(set kernelSet, x []float32) (y []float32, ok bool) {
	y = append([]float32(nil), x...)
	return y, C.cpu_activation_probe(C.int(set), 1, (*C.float)(unsafe.SliceData(y)), C.int(len(y))) == 0
}

// expsumProbe is the token-probability kernel: the sum of e^(x[i] - m) in double.
func expsumProbe(set kernelSet, x []float32, m float32) float64 {
	return float64(C.cpu_expsum_probe(C.int(set), (*C.float)(unsafe.SliceData(x)), C.int(len(x)), C.float(m)))
}

// poolProbe runs tasks tasks on a pool of nthreads, alternating bursts of burstEvery
// tasks with as many outside one, and returns how often a thread missed a task or a run
// returned before all its threads had finished (-1: the pool did not start).
func poolProbe(nthreads, tasks, burstEvery int) int {
	return int(C.cpu_pool_probe(C.int(nthreads), C.int(tasks), C.int(burstEvery)))
}
