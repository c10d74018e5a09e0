package native

import (
	"math/rand/v2"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
)

// BenchmarkF32GemmAgainstOpenBLAS times the exact path's products at the 3B model's shapes
// (bf16 weights; prefill of 8, 32 and 295 tokens, the vision tower at 1024 patches)
// side by side in one run: our kernels (packing and widening included) and cblas_sgemm on
// weights widened to float32 beforehand (what f32_kernel=openblas runs, less its
// widening). Each iteration takes the best of three runs each; the metrics are rates and
// the ratio ours/openblas (docs/cpu-backend.md, Own float32 kernels):
//
//	go test -run - -bench F32GemmAgainstOpenBLAS -benchtime 3x ./engine/native
func BenchmarkF32GemmAgainstOpenBLAS(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	level := f32KernelBest()
	for _, s := range []struct {
		name          string
		n, rows, cols int
	}{
		{"q-o-8x2048x2048", 8, 2048, 2048},
		{"gate-up-8x11008x2048", 8, 11008, 2048},
		{"down-8x2048x11008", 8, 2048, 11008},
		{"q-o-32x2048x2048", 32, 2048, 2048},
		{"gate-up-32x11008x2048", 32, 11008, 2048},
		{"q-o-295x2048x2048", 295, 2048, 2048},
		{"gate-up-295x11008x2048", 295, 11008, 2048},
		{"down-295x2048x11008", 295, 2048, 11008},
		{"vision-fc0-1024x4304x1152", 1024, 4304, 1152},
		{"patch-1024x1152x588", 1024, 1152, 588},
	} {
		b.Run(s.name, func(b *testing.B) {
			w := make([]float32, s.rows*s.cols)
			for i := range w {
				w[i] = (2*rng.Float32() - 1) * 0.05
			}
			raw, _ := encodeRow(w, checkpoint.BF16)
			p := f32Product{N: s.n, Cols: s.rows, K: s.cols, Alpha: 1, LdX: s.cols, B: raw,
				DType: checkpoint.BF16, LdB: s.cols, LdY: s.rows}
			p.X = make([]float32, s.n*s.cols)
			for i := range p.X {
				p.X[i] = 2*rng.Float32() - 1
			}
			var ours, blas float64
			for range b.N {
				_, to, err := f32GemmProbe(level, -1, p, 2, 3)
				if err != nil {
					b.Fatal(err)
				}
				_, tb, err := f32GemmProbe("openblas", -1, p, 2, 3)
				if err != nil {
					b.Fatal(err)
				}
				ours, blas = max(ours, 1/to), max(blas, 1/tb)
			}
			flop := 2 * float64(s.n) * float64(s.rows) * float64(s.cols)
			b.ReportMetric(flop*ours/1e9, level+"-GFLOP/s")
			b.ReportMetric(flop*blas/1e9, "openblas-GFLOP/s")
			b.ReportMetric(ours/blas, "ours/openblas")
		})
	}
}
