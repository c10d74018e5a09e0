package native

import (
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkVNNI measures the VNNI prototype (cpu_vnni_probe.c: int8-rounded activations
// times q8 weights with VPDPBUSD) against what the engine runs, on CPUs with AVX512_VNNI
// (docs/cpu-backend.md, "VNNI, measured"):
//
//	go test -run - -bench VNNI -benchtime 3x ./engine/native
//
// decode: the batch-1 product over 24 q8 matrices of 11008x2048 (the gate/up shape at 3B,
// 0.6 GB) on 2 threads, GB/s of weights, against the engine's q8 kernel (MeasureMatvecQ8,
// float32 activations) on the same shapes, and the prototype's error against a float64
// product, relative to the largest output. prefill-inner: the two GEMM inner loops alone
// with their data in L1, one core, G multiply-adds per second (the ceiling of either GEMM).
func BenchmarkVNNI(b *testing.B) {
	if !vnniAvailable() {
		b.Skip("this CPU has no AVX512_VNNI (or no AVX512_BF16 to compare with)")
	}
	b.Run("decode", func(b *testing.B) {
		const rows, cols, mats, threads = 11008, 2048, 24, 2
		rng := rand.New(rand.NewPCG(3, 4))
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = (2*rng.Float32() - 1) * 0.05
		}
		one := q8Quantize(w, cols)
		all := make([]byte, 0, len(one)*mats)
		for range mats {
			all = append(all, one...)
		}
		x := make([]float32, cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		var vnni, engine float64
		var y []float32
		for range b.N {
			got, g, err := vnniMatvec(all, rows, cols, mats, x, threads, 3)
			if err != nil {
				b.Fatal(err)
			}
			e, err := MeasureMatvecQ8(rows, cols, mats, threads, 3)
			if err != nil {
				b.Fatal(err)
			}
			y, vnni, engine = got, max(vnni, g), max(engine, e)
		}
		deq := q8Dequantize(one, cols)
		var maxErr, maxY float64
		for r := range rows {
			var s float64
			for k := range cols {
				s += float64(deq[r*cols+k]) * float64(x[k])
			}
			maxErr, maxY = max(maxErr, math.Abs(float64(y[r])-s)), max(maxY, math.Abs(s))
		}
		b.ReportMetric(vnni, "vnni-GB/s")
		b.ReportMetric(engine, "engine-GB/s")
		b.ReportMetric(vnni/engine, "vnni/engine")
		b.ReportMetric(maxErr/maxY, "vnni-rel-err")
	})
	b.Run("prefill-inner", func(b *testing.B) {
		var vnni, bf16 float64
		for range b.N {
			v, f, err := vnniInnerGMACs(200000)
			if err != nil {
				b.Fatal(err)
			}
			vnni, bf16 = max(vnni, v), max(bf16, f)
		}
		b.ReportMetric(vnni, "vnni-GMAC/s")
		b.ReportMetric(bf16, "bf16-GMAC/s")
		b.ReportMetric(vnni/bf16, "vnni/bf16")
	})
}
