package native

/*
#include "cpu_internal.h"
*/
import "C"

import "github.com/locateanything/detect/internal/settings"

// Matmul is how the cpu backend multiplies in prefill and the vision tower (and their
// attention products): its "matmul" option line, which the C side parses.
type Matmul string

const (
	// MatmulAuto picks for the path: MatmulF32 on the exact path; on the fast path
	// (weights_quant=q8) the best this CPU runs, MatmulAMX, else MatmulAVX512BF16, else
	// MatmulF32 (FastMatmul). Open resolves it; Backend.Matmul names what it chose.
	MatmulAuto Matmul = "auto"
	// MatmulF32 is float32 throughout: the exact path's products, and what other backends
	// report.
	MatmulF32 Matmul = "f32"
	// MatmulAMX is bf16 inputs on AMX tiles with float32 sums, where the CPU has AMX.
	MatmulAMX Matmul = "amx"
	// MatmulAVX512BF16 is the same bf16 inputs and float32 sums with AVX512_BF16's
	// VDPBF16PS, on the same packed tiles, for CPUs without AMX (AMD Zen 4 and 5, Intel
	// Cooper Lake): the AMX path's rounding, so its accuracy.
	MatmulAVX512BF16 Matmul = "avx512bf16"
)

// Matmuls lists every matmul, the default first.
var Matmuls = settings.Set[Matmul]{MatmulAuto, MatmulF32, MatmulAMX, MatmulAVX512BF16}

// Available says whether this CPU (and kernel, for AMX's tile state) runs m's products;
// auto and f32 run everywhere.
func (m Matmul) Available() bool {
	switch m {
	case MatmulAuto, MatmulF32:
		return true
	case MatmulAMX:
		return C.cpu_bf16_matmul_available(C.CPU_MATMUL_AMX) != 0
	case MatmulAVX512BF16:
		return C.cpu_bf16_matmul_available(C.CPU_MATMUL_AVX512BF16) != 0
	}
	return false
}

// FastMatmul is what auto picks on the fast path on this CPU: amx, else avx512bf16, else
// f32.
func FastMatmul() Matmul { return Matmul(C.GoString(C.cpu_matmul_name(C.cpu_matmul_fast()))) }

// resolve is what m means on the path: auto becomes f32 on the exact path and FastMatmul
// on the fast one; any other value is itself.
func (m Matmul) resolve(fast bool) Matmul {
	switch {
	case m != MatmulAuto:
		return m
	case fast:
		return FastMatmul()
	}
	return MatmulF32
}

// Split is which of the bf16 products carry each activation as two bf16, its rounding and
// what the rounding lost (16 significant bits instead of 8, for twice the multiplies):
// the cpu backend's "split_activations" option line. The float32 products ignore it.
type Split string

const (
	// SplitVision splits the activations of the image's products (the patch embedding,
	// the vision tower and the projector); the prompt's prefill rounds them once. The
	// default: where the fast path's answers moved most, at a fraction of the cost of
	// splitting everything (docs/cpu-backend.md, Split activations).
	SplitVision Split = "vision"
	// SplitNone rounds every product's activations once (the fast path before the split).
	SplitNone Split = "none"
	// SplitAll splits the prefill's products too.
	SplitAll Split = "all"
)

// Splits lists every split, the default first.
var Splits = settings.Set[Split]{SplitVision, SplitNone, SplitAll}
