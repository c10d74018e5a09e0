package native

import "github.com/locateanything/detect/internal/settings"

// Matmul is how the cpu backend multiplies in prefill and the vision tower: its "matmul"
// option line, which the C side parses.
type Matmul string

const (
	// MatmulF32 is OpenBLAS in float32: the default, and what other backends report.
	MatmulF32 Matmul = "f32"
	// MatmulAMX is bf16 on AMX tiles with float32 sums, where the CPU has AMX.
	MatmulAMX Matmul = "amx"
)

// Matmuls lists every matmul, the default first.
var Matmuls = settings.Set[Matmul]{MatmulF32, MatmulAMX}
