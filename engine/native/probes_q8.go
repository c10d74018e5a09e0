package native

/*
#include "cpu_internal.h"
*/
import "C"

import (
	"unsafe"

	"github.com/locateanything/detect/engine/checkpoint"
)

// Probes of the int8 weight format (cpu_quant.c) and its kernels (cpu_kernels_q8.c), for
// tests; not part of the package's API.

// q8Block is the number of weights sharing one scale.
const q8Block = C.CPU_Q8_BLOCK

// q8RowBytes is the size of one q8 row of n weights.
func q8RowBytes(n int) int { return int(C.cpu_row_bytes(C.CPU_DTYPE_Q8, C.int(n))) }

// q8Quantize converts rows of n float32 weights (n a multiple of q8Block) to q8 rows with
// the quantizer open uses (AVX-512 where the CPU has it).
func q8Quantize(w []float32, n int) []byte { return q8QuantizeWith(w, n, false) }

// q8QuantizePlain is q8Quantize through the plain C quantizer, which the other must equal
// byte for byte.
func q8QuantizePlain(w []float32, n int) []byte { return q8QuantizeWith(w, n, true) }

func q8QuantizeWith(w []float32, n int, plain bool) []byte {
	rows := len(w) / n
	out := make([]byte, rows*q8RowBytes(n))
	for r := range rows {
		src, dst := (*C.float)(unsafe.SliceData(w[r*n:])), unsafe.Pointer(unsafe.SliceData(out[r*q8RowBytes(n):]))
		if plain {
			C.cpu_q8_quantize_row_plain(src, C.int(n), dst)
		} else {
			C.cpu_q8_quantize_row(src, C.int(n), dst)
		}
	}
	return out
}

// q8Dequantize converts q8 rows of n weights back to float32.
func q8Dequantize(q []byte, n int) []float32 {
	rows := len(q) / q8RowBytes(n)
	out := make([]float32, rows*n)
	for r := range rows {
		C.cpu_q8_dequantize_row(unsafe.Pointer(unsafe.SliceData(q[r*q8RowBytes(n):])), C.int(n),
			(*C.float)(unsafe.SliceData(out[r*n:])))
	}
	return out
}

// q8dtype is the int8 format's dtype as the kernel probes take it.
const q8dtype = checkpoint.DType(C.CPU_DTYPE_Q8)
