package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
)

// f32Levels are the exact path's kernel levels (cpu_gemm_f32.c) the tests run wherever
// the CPU has them; plain runs everywhere.
var f32Levels = []string{"plain", "avx2", "avx512"}

// skipWithoutF32Level skips a level this CPU can not run, saying why.
func skipWithoutF32Level(t *testing.T, level string) {
	t.Helper()
	if _, err := f32KernelLevel(level); err != nil {
		t.Skipf("%v (the plain level still covers the logic)", err)
	}
}

// f32Case builds a random product and its float64 reference: want[i*cols+j] and the sum of
// |terms| that bounds any float32 summation's error.
func f32Case(rng *rand.Rand, n, cols, k int, dt checkpoint.DType, kn bool, pad int) (p f32Product, want, mag []float64) {
	p = f32Product{N: n, Cols: cols, K: k, Alpha: 0.75, LdX: k + pad, DType: dt, KN: kn, LdY: cols + pad}
	p.X = make([]float32, (n-1)*p.LdX+k)
	for i := range p.X {
		p.X[i] = 2*rng.Float32() - 1
	}
	// B as [cols, k] (wt) or [k, cols] (kn) rows with pad extra elements each
	rows, rowLen := cols, k
	if kn {
		rows, rowLen = k, cols
	}
	p.LdB = rowLen + pad
	w := make([]float32, rows*p.LdB)
	for i := range w {
		w[i] = 2*rng.Float32() - 1
	}
	var exact []float32
	p.B, exact = encodeRow(w, dt)
	b := func(j, kk int) float64 {
		if kn {
			return float64(exact[kk*p.LdB+j])
		}
		return float64(exact[j*p.LdB+kk])
	}
	want, mag = make([]float64, n*cols), make([]float64, n*cols)
	for i := range n {
		for j := range cols {
			var s, m float64
			for kk := range k {
				term := float64(p.X[i*p.LdX+kk]) * b(j, kk)
				s += term
				m += math.Abs(term)
			}
			want[i*cols+j], mag[i*cols+j] = 0.75*s, 0.75*m
		}
	}
	return p, want, mag
}

// checkF32 says whether y holds the product within float32 summation error: k roundings of
// at most 2^-24 each of a partial sum bounded by the sum of |terms| (plus alpha's one).
func checkF32(t *testing.T, what string, p f32Product, y []float32, want, mag []float64) {
	t.Helper()
	bad := 0
	for i := range p.N {
		for j := range p.Cols {
			got := float64(y[i*p.LdY+j])
			tol := float64(p.K+2)*0x1p-24*mag[i*p.Cols+j] + 1e-30
			if d := math.Abs(got - want[i*p.Cols+j]); !(d <= tol) {
				if bad++; bad <= 3 {
					t.Errorf("%s: y[%d,%d] = %g, want %g (off %.3g, bound %.3g)", what, i, j, got, want[i*p.Cols+j], d, tol)
				}
			}
		}
	}
}

// TestF32GemmLevelsMatchReference runs every kernel level this CPU has on odd shapes (rows
// around the micro-kernels' 4/6/12 and the short-prompt cut, columns around the panels'
// 16/32, k past one packed block of 384 and off the vector widths), both operand forms,
// bf16/f16/f32 weights, strided rows, packed and unpacked, against a float64 reference.
func TestF32GemmLevelsMatchReference(t *testing.T) {
	shapes := []struct{ n, cols, k int }{
		{1, 33, 17}, {3, 1, 5}, {3, 67, 100}, {17, 31, 400}, {13, 65, 16}, {40, 97, 771}, {25, 16, 33},
	}
	for _, level := range f32Levels {
		t.Run(level, func(t *testing.T) {
			skipWithoutF32Level(t, level)
			rng := rand.New(rand.NewPCG(7, 11))
			for _, s := range shapes {
				for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F16, checkpoint.F32} {
					for _, kn := range []bool{false, true} {
						p, want, mag := f32Case(rng, s.n, s.cols, s.k, dt, kn, 3)
						// smallRows 0 packs every product; 1<<20 reads every wt product unpacked
						for _, small := range []int{0, -1, 1 << 20} {
							y, _, err := f32GemmProbe(level, small, p, 2, 1)
							if err != nil {
								t.Fatal(err)
							}
							what := strings.Join([]string{level, dt.String(), map[bool]string{false: "wt", true: "kn"}[kn]}, "/")
							checkF32(t, what+" "+shapeName(s.n, s.cols, s.k, small), p, y, want, mag)
						}
					}
				}
			}
		})
	}
}

func shapeName(n, cols, k, small int) string {
	return fmt.Sprintf("n=%d N=%d K=%d small_rows=%d", n, cols, k, small)
}

// TestF32GemmDoesNotDependOnThreads checks the arithmetic's promise: each output is summed
// the same way whatever the thread count (so the panel or row split never shows in the
// bits), packed and unpacked.
func TestF32GemmDoesNotDependOnThreads(t *testing.T) {
	for _, level := range f32Levels {
		t.Run(level, func(t *testing.T) {
			skipWithoutF32Level(t, level)
			rng := rand.New(rand.NewPCG(3, 5))
			for _, kn := range []bool{false, true} {
				for _, n := range []int{5, 50} {
					p, _, _ := f32Case(rng, n, 203, 777, checkpoint.BF16, kn, 0)
					one, _, err := f32GemmProbe(level, -1, p, 1, 1)
					if err != nil {
						t.Fatal(err)
					}
					for _, threads := range []int{2, 3} {
						y, _, err := f32GemmProbe(level, -1, p, threads, 1)
						if err != nil {
							t.Fatal(err)
						}
						for i := range y {
							if math.Float32bits(y[i]) != math.Float32bits(one[i]) {
								t.Fatalf("kn=%v n=%d: %d threads give y[%d] = %g, one thread %g", kn, n, threads, i, y[i], one[i])
							}
						}
					}
				}
			}
		})
	}
}

// TestParityEachF32Kernel runs the whole model (vision, prefill, greedy decode) on both
// tiny checkpoints through each kernel level this CPU has, OpenBLAS included, and with
// every product packed or every weight product unpacked, against the PyTorch goldens at
// the same tolerance as TestParityWithPyTorchReference.
func TestParityEachF32Kernel(t *testing.T) {
	lockThread(t)
	type variant struct {
		name string
		opts map[string]string
	}
	var variants []variant
	for _, level := range append([]string{"openblas"}, f32Levels...) {
		variants = append(variants, variant{level, map[string]string{"f32_kernel": level}})
	}
	best := f32KernelBest()
	variants = append(variants,
		variant{best + "-all-packed", map[string]string{"f32_kernel": best, "f32_small_rows": "0"}},
		variant{best + "-all-unpacked", map[string]string{"f32_kernel": best, "f32_small_rows": "100000"}})
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		dir, idx := readGoldens(t, ckpt)
		m := openModel(t, filepath.Join(checkpointsDir, ckpt))
		embeddings := map[string][]float32{} // the last case's, per variant
		for _, v := range variants {
			t.Run(ckpt+"/"+v.name, func(t *testing.T) {
				skipWithoutF32Level(t, v.opts["f32_kernel"])
				b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2, BackendOptions: v.opts})
				for _, c := range idx.Cases {
					t.Run(c.Name, func(t *testing.T) { checkCase(t, b, dir, c) })
				}
				emb, _, _ := b.ImageEmbeddings()
				embeddings[v.name] = append([]float32(nil), emb...)
			})
		}
		// The option reaches the kernels: plain C (multiply, then add) and FMA, or our
		// order and OpenBLAS's, can not give the same bits everywhere.
		for _, other := range []string{"openblas", best} {
			if other != "plain" && embeddings[other] != nil && slices.Equal(embeddings["plain"], embeddings[other]) {
				t.Errorf("%s: f32_kernel=plain and %s give identical image embeddings", ckpt, other)
			}
		}
	}
}

// TestF32KernelOptionErrors: a bad f32_kernel or f32_small_rows value fails open with a
// clear error.
func TestF32KernelOptionErrors(t *testing.T) {
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	for opt, want := range map[string]string{
		"f32_kernel":     "options: f32_kernel=lots: want auto, avx512, avx2, plain or openblas",
		"f32_small_rows": "options: f32_small_rows=lots: want a row count",
	} {
		_, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: 16, BackendOptions: map[string]string{opt: "lots"}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("option %s=lots: error %v, want %q", opt, err, want)
		}
	}
	for _, level := range f32Levels {
		if _, err := f32KernelLevel(level); err == nil {
			continue
		}
		_, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: 16, BackendOptions: map[string]string{"f32_kernel": level}})
		if err == nil || !strings.Contains(err.Error(), "this CPU lacks the instructions") {
			t.Errorf("f32_kernel=%s on a CPU without it: %v", level, err)
		}
	}
}
