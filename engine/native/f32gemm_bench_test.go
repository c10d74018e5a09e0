package native

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/checkpoint"
)

// BenchmarkF32GemmAgainstOpenBLAS times the exact path's products at the 3B model's shapes
// (bf16 weights; prefill of 8, 32 and 295 tokens, the vision tower at 1024 patches)
// side by side in one run: our kernels (packing and widening included) and cblas_sgemm on
// weights widened to float32 beforehand (what f32_kernel=openblas runs, less its
// widening), two threads each. Each iteration takes the best of three runs of each, one
// after the other; the metrics are the medians over iterations of each time and of the
// per-iteration speedup openblas/ours (docs/cpu-backend.md, Own float32 kernels):
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
			var ours, blas, ratio []float64
			for range b.N {
				_, to, err := f32GemmProbe(level, -1, p, 2, 3)
				if err != nil {
					b.Fatal(err)
				}
				_, tb, err := f32GemmProbe("openblas", -1, p, 2, 3)
				if err != nil {
					b.Fatal(err)
				}
				ours, blas, ratio = append(ours, to*1e3), append(blas, tb*1e3), append(ratio, tb/to)
			}
			b.ReportMetric(median(ours), level+"-ms")
			b.ReportMetric(median(blas), "openblas-ms")
			b.ReportMetric(median(ratio), "speedup")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkF32ShortPromptCrossover times a product both ways our kernels can run it, packed
// (f32_small_rows=0) and reading the bf16 weights unpacked (every row count), at the row
// counts around the default cut of 32, for the 3B model's three weight shapes. The
// metric packed/unpacked above 1 means unpacked is faster at that many rows:
//
//	go test -run - -bench F32ShortPromptCrossover -benchtime 3x ./engine/native
func BenchmarkF32ShortPromptCrossover(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	level := f32KernelBest()
	for _, s := range []struct {
		name       string
		rows, cols int
	}{{"2048x2048", 2048, 2048}, {"11008x2048", 11008, 2048}, {"2048x11008", 2048, 11008}} {
		w := make([]float32, s.rows*s.cols)
		for i := range w {
			w[i] = (2*rng.Float32() - 1) * 0.05
		}
		raw, _ := encodeRow(w, checkpoint.BF16)
		for _, n := range []int{1, 8, 16, 32, 64, 128} {
			b.Run(fmt.Sprintf("%s/n=%d", s.name, n), func(b *testing.B) {
				p := f32Product{N: n, Cols: s.rows, K: s.cols, Alpha: 1, LdX: s.cols, B: raw,
					DType: checkpoint.BF16, LdB: s.cols, LdY: s.rows}
				p.X = make([]float32, n*s.cols)
				for i := range p.X {
					p.X[i] = 2*rng.Float32() - 1
				}
				var packed, unpacked, ratio []float64
				for range b.N {
					_, tp, err := f32GemmProbe(level, 0, p, 2, 3)
					if err != nil {
						b.Fatal(err)
					}
					_, tu, err := f32GemmProbe(level, 1<<20, p, 2, 3)
					if err != nil {
						b.Fatal(err)
					}
					packed, unpacked, ratio = append(packed, tp*1e3), append(unpacked, tu*1e3), append(ratio, tp/tu)
				}
				b.ReportMetric(median(packed), "packed-ms")
				b.ReportMetric(median(unpacked), "unpacked-ms")
				b.ReportMetric(median(ratio), "packed/unpacked")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkF32KernelsModel runs the whole model's prefill (8, 32 and 295 text tokens) and
// vision tower (32x32 patches) on two engines, f32_kernel=openblas and our best level,
// alternating per iteration so both see the same machine, and reports the median time of
// each and the median per-iteration speedup openblas/ours. It runs on tiny-bf16 (fixed
// costs around the kernels), and on a full-size checkpoint when LA_BENCH_3B names its
// directory (BenchmarkBlockStep says how to make and share it):
//
//	go test -run - -bench F32KernelsModel -benchtime 5x ./engine/native
func BenchmarkF32KernelsModel(b *testing.B) {
	models := []struct{ name, dir string }{{"tiny-bf16", filepath.Join(checkpointsDir, "tiny-bf16")}}
	if dir := os.Getenv("LA_BENCH_3B"); dir != "" {
		models = append(models, struct{ name, dir string }{"3b", dir})
	}
	level := f32KernelBest()
	base := testPrompt(0)
	prompt := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = base[i%len(base)]
		}
		return ids
	}
	for _, mc := range models {
		b.Run(mc.name, func(b *testing.B) {
			lockThread(b)
			m := openModel(b, mc.dir)
			open := func(kernel string) *Backend {
				return openBackend(b, m, Options{MaxBatch: 1, MaxSeqLen: 300, Threads: 2,
					BackendOptions: map[string]string{"f32_kernel": kernel}})
			}
			engines := []*Backend{open("openblas"), open(level)}
			stages := []struct {
				name string
				run  func(be *Backend) error
			}{
				{"vision-32x32", func(be *Backend) error {
					if err := be.Vision(testPatches(32, 32, 1), 32, 32); err != nil {
						return err
					}
					return be.Reset() // the next prefill has no image
				}},
			}
			for _, n := range []int{8, 32, 295} {
				ids := prompt(n)
				stages = append(stages, struct {
					name string
					run  func(be *Backend) error
				}{fmt.Sprintf("prefill-%d", n), func(be *Backend) error {
					if _, err := prefill1(be, ids); err != nil {
						return err
					}
					return be.Release(0)
				}})
			}
			for _, st := range stages {
				b.Run(st.name, func(b *testing.B) {
					var t [2][]float64
					var ratio []float64
					for range b.N {
						for i, be := range engines {
							start := time.Now()
							if err := st.run(be); err != nil {
								b.Fatal(err)
							}
							t[i] = append(t[i], time.Since(start).Seconds()*1e3)
						}
						ratio = append(ratio, t[0][len(t[0])-1]/t[1][len(t[1])-1])
					}
					b.ReportMetric(median(t[0]), "openblas-ms")
					b.ReportMetric(median(t[1]), level+"-ms")
					b.ReportMetric(median(ratio), "speedup")
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}
