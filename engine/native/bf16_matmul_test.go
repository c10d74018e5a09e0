package native

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
)

// bf16Value is f rounded to bfloat16 (nearest-even), as a float32.
func bf16Value(f float32) float32 { return math.Float32frombits(uint32(bf16Bits(f)) << 16) }

// bf16Matmuls are the kernel sets of the fast path's bf16 products; each test runs on
// every one of them, and skips (saying why) the ones this CPU lacks.
var bf16Matmuls = []Matmul{MatmulAMX, MatmulAVX512BF16}

func skipUnavailable(t testing.TB, m Matmul) {
	t.Helper()
	if !m.Available() {
		why := map[Matmul]string{
			MatmulAMX:        "this CPU or kernel has no AMX (bf16 tiles)",
			MatmulAVX512BF16: "this CPU has no AVX512_BF16",
		}[m]
		t.Skipf("%s: matmul=%s can not run here", why, m)
	}
}

// bf16Model is the plain model of the bf16 products: y[i, r] = the float32 sum, over the
// column pairs (2k, 2k+1) in order, of bf16(x) bf16(w) products, the odd column's product
// added first, then the even one's, each addition rounded to float32, as VDPBF16PS
// specifies; an odd last column pairs with a zero. w is the weights as stored (dequantized
// for q8).
func bf16Model(x, w []float32, n, rows, cols int) []float32 {
	y := make([]float32, n*rows)
	for i := 0; i < n; i++ {
		xr := bf16Values(x[i*cols : (i+1)*cols])
		for r := 0; r < rows; r++ {
			y[i*rows+r] = addPairs(0, xr, bf16Values(w[r*cols:(r+1)*cols]), 0, cols)
		}
	}
	return y
}

// bf16Values is v rounded to bfloat16, element by element.
func bf16Values(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, f := range v {
		out[i] = bf16Value(f)
	}
	return out
}

// addPairs adds to s, as VDPBF16PS does, the products of x and w (both already bf16) over
// the column pairs from k0 up to k1: each pair's odd product first, then the even one's,
// each addition rounded to float32; an odd last column pairs with a zero.
func addPairs(s float32, x, w []float32, k0, k1 int) float32 {
	for k := k0; k < k1; k += 2 {
		var odd float32
		if k+1 < k1 {
			odd = x[k+1] * w[k+1]
		}
		s = (s + odd) + x[k]*w[k]
	}
	return s
}

// productInputs draws a product's operands: weights [rows, cols] in (-0.5, 0.5) as raw
// rows of dtype dt (q8dtype included) and as the values those rows hold, and activations
// [n, cols] in (-2, 2).
func productInputs(rng *rand.Rand, dt checkpoint.DType, n, rows, cols int) (raw []byte, stored, x []float32) {
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = (2*rng.Float32() - 1) * 0.5
	}
	if dt == q8dtype {
		raw = q8Quantize(w, cols)
		stored = q8Dequantize(raw, cols)
	} else {
		raw, stored = encodeRow(w, dt)
	}
	x = make([]float32, n*cols)
	for i := range x {
		x[i] = 4*rng.Float32() - 2
	}
	return raw, stored, x
}

// sameOnAnyThreads runs the product again on 1, 3 and 7 threads (fewer weight panels
// than threads split the rows too) and wants want, what two threads gave, bit for bit.
func sameOnAnyThreads(t *testing.T, mm Matmul, split bool, dt checkpoint.DType, raw []byte, n, rows, cols int, x, want []float32) {
	t.Helper()
	for _, threads := range []int{1, 3, 7} {
		other, _, err := bf16GemmProbe(mm, split, dt, raw, rows, cols, x, n, threads, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range other {
			if math.Float32bits(other[i]) != math.Float32bits(want[i]) {
				t.Fatalf("dtype %d, %dx%dx%d, split %v: element %d differs between %d threads and two", dt, n, rows, cols, split, i, threads)
			}
		}
	}
}

// TestBF16GemmMatchesReference holds each bf16 kernel set's product to a float64 sum of
// the same bf16 inputs (within 1e-6 of the products' magnitudes: the accuracy the fast
// path documents), for every weight dtype (q8 included) and for shapes that leave partial
// tiles in every direction; the AVX512_BF16 kernel also to the plain model of its rounding
// bit for bit; and the result must not depend on the number of threads (1 to 7, so that
// some shapes have fewer weight panels than threads).
func TestBF16GemmMatchesReference(t *testing.T) {
	for _, mm := range bf16Matmuls {
		t.Run(string(mm), func(t *testing.T) {
			skipUnavailable(t, mm)
			testBF16Gemm(t, mm)
		})
	}
}

func testBF16Gemm(t *testing.T, mm Matmul) {
	rng := rand.New(rand.NewPCG(7, 17))
	shapes := []struct{ n, rows, cols int }{
		{1, 1, 1}, {1, 17, 5}, {3, 129, 64}, {17, 33, 100}, {32, 128, 32}, {33, 200, 96},
		{70, 300, 288}, {40, 257, 608}, {9, 130, 33},
	}
	for _, dt := range []checkpoint.DType{checkpoint.F32, checkpoint.BF16, checkpoint.F16, q8dtype} {
		for _, s := range shapes {
			if dt == q8dtype && s.cols%q8Block != 0 {
				continue
			}
			raw, exact, x := productInputs(rng, dt, s.n, s.rows, s.cols)
			got, _, err := bf16GemmProbe(mm, false, dt, raw, s.rows, s.cols, x, s.n, 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < s.n; i++ {
				for r := 0; r < s.rows; r++ {
					var sum, mag float64
					for k := 0; k < s.cols; k++ {
						p := float64(bf16Value(x[i*s.cols+k])) * float64(bf16Value(exact[r*s.cols+k]))
						sum += p
						mag += math.Abs(p)
					}
					if d := math.Abs(float64(got[i*s.rows+r]) - sum); d > 1e-6*mag+1e-30 {
						t.Fatalf("dtype %d, n %d rows %d cols %d: y[%d,%d] = %g, want %g (|products| %g)",
							dt, s.n, s.rows, s.cols, i, r, got[i*s.rows+r], sum, mag)
					}
				}
			}
			if mm == MatmulAVX512BF16 {
				want := bf16Model(x, exact, s.n, s.rows, s.cols)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("dtype %d, %v: element %d = %g, the plain model of the rounding gives %g",
							dt, s, i, got[i], want[i])
					}
				}
			}
			sameOnAnyThreads(t, mm, false, dt, raw, s.n, s.rows, s.cols, x, got)
		}
	}
}

// bf16SplitModel is the plain model of the split products (split_activations): each
// activation x goes in as hi = bf16(x) and lo = bf16(x - hi), and each output's one float32
// sum takes, block of 256 columns after block (the kernels' column blocks), the hi row's
// pairs as bf16Model orders them, then the lo row's pairs of the same columns.
func bf16SplitModel(x, w []float32, n, rows, cols int) []float32 {
	const block = 256
	y := make([]float32, n*rows)
	for i := 0; i < n; i++ {
		hi := bf16Values(x[i*cols : (i+1)*cols])
		lo := make([]float32, cols)
		for k, v := range x[i*cols : (i+1)*cols] {
			lo[k] = bf16Value(v - hi[k])
		}
		for r := 0; r < rows; r++ {
			wr := bf16Values(w[r*cols : (r+1)*cols])
			var s float32
			for k0 := 0; k0 < cols; k0 += block {
				s = addPairs(s, hi, wr, k0, min(k0+block, cols))
				s = addPairs(s, lo, wr, k0, min(k0+block, cols))
			}
			y[i*rows+r] = s
		}
	}
	return y
}

// TestBF16SplitGemm holds the split products (split_activations, each activation as two
// bf16) to the float32 activations they stand for: within 4e-6 of the products'
// magnitudes of a float64 sum of x times bf16(W), where rounding x once lands up to 2^-8
// (relative) away (the test checks that it does, so a split that quietly rounded once would fail);
// on AVX512_BF16 bit for bit to the plain model of their order (bf16SplitModel); and the
// same bits on 1, 3 and 7 threads.
func TestBF16SplitGemm(t *testing.T) {
	for _, mm := range bf16Matmuls {
		t.Run(string(mm), func(t *testing.T) {
			skipUnavailable(t, mm)
			rng := rand.New(rand.NewPCG(9, 27))
			for _, dt := range []checkpoint.DType{checkpoint.BF16, q8dtype} {
				for _, s := range []struct{ n, rows, cols int }{{1, 17, 32}, {9, 130, 33}, {17, 33, 100}, {33, 200, 96}, {40, 257, 608}, {70, 130, 544}} {
					if dt == q8dtype && s.cols%q8Block != 0 {
						continue // int8 rows are whole blocks
					}
					raw, exact, x := productInputs(rng, dt, s.n, s.rows, s.cols)
					split, _, err := bf16GemmProbe(mm, true, dt, raw, s.rows, s.cols, x, s.n, 2, 1)
					if err != nil {
						t.Fatal(err)
					}
					once, _, err := bf16GemmProbe(mm, false, dt, raw, s.rows, s.cols, x, s.n, 2, 1)
					if err != nil {
						t.Fatal(err)
					}
					var worstSplit, worstOnce float64 // largest |error| / |products|
					for i := 0; i < s.n; i++ {
						for r := 0; r < s.rows; r++ {
							var sum, mag float64
							for k := 0; k < s.cols; k++ {
								p := float64(x[i*s.cols+k]) * float64(bf16Value(exact[r*s.cols+k]))
								sum += p
								mag += math.Abs(p)
							}
							worstSplit = max(worstSplit, math.Abs(float64(split[i*s.rows+r])-sum)/mag)
							worstOnce = max(worstOnce, math.Abs(float64(once[i*s.rows+r])-sum)/mag)
						}
					}
					if worstSplit > 4e-6 {
						t.Errorf("dtype %d, %v: split products within %.3g of float32 activations' sums, want <= 4e-6", dt, s, worstSplit)
					}
					if worstOnce < 20*worstSplit {
						t.Errorf("dtype %d, %v: rounding once lands within %.3g, split within %.3g: the split gained too little", dt, s, worstOnce, worstSplit)
					}
					if mm == MatmulAVX512BF16 {
						want := bf16SplitModel(x, exact, s.n, s.rows, s.cols)
						for i := range want {
							if math.Float32bits(split[i]) != math.Float32bits(want[i]) {
								t.Fatalf("dtype %d, %v: element %d = %g, the plain model of the split gives %g", dt, s, i, split[i], want[i])
							}
						}
					}
					sameOnAnyThreads(t, mm, true, dt, raw, s.n, s.rows, s.cols, x, split)
				}
			}
		})
	}
}

// TestBF16ModelIsTheRounding checks the plain model itself on sums whose result depends on
// the rounding steps it describes, so that a model that rounded anywhere else (or summed
// in another order) fails: the activations and weights rounded to bf16 (1 + 2^-9 is 1 in
// bf16), each pair's odd product added before the even one, each addition rounded to
// float32.
func TestBF16ModelIsTheRounding(t *testing.T) {
	e24 := float32(math.Ldexp(1, -24)) // half an ulp of 1 in float32, a power of two in bf16
	ones := []float32{1, 1, 1, 1}
	cases := []struct {
		x, w []float32
		want float32
	}{
		{[]float32{1 + 1.0/512}, []float32{1}, 1},                // x rounds to 1 in bf16
		{[]float32{3, 5}, []float32{7, 11}, 21 + 55},             // plain sum, exact
		{[]float32{1, 0, e24, -1}, ones, e24},                    // odd first: (1 - 1) + e24; even first gives 0
		{[]float32{1, 0, -1, e24}, ones, 0},                      // each addition rounded: (1 + e24) - 1; exact gives e24
		{[]float32{1, 1, 1, 1, 1}, []float32{1, 2, 3, 4, 5}, 15}, // an odd last column pairs with zero
	}
	for i, c := range cases {
		if got := bf16Model(c.x, c.w, 1, 1, len(c.x))[0]; got != c.want {
			t.Errorf("case %d: model gives %.10g, want %.10g", i, got, c.want)
		}
	}
}

// TestMatmulOption checks the matmul option's refusals (an unknown name, a kernel set this
// CPU lacks), that every kernel set this CPU has can be forced, and what auto picks: f32
// on the exact path, and on the q8 fast path the best bf16 products CPUID reports (AMX,
// then AVX512_BF16, then f32), which Matmul then names.
func TestMatmulOption(t *testing.T) {
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	_, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1,
		BackendOptions: map[string]string{"matmul": "bf16"}})
	if err == nil || !strings.Contains(err.Error(), "matmul=bf16: want auto, f32, amx or avx512bf16") {
		t.Fatalf("open with matmul=bf16: %v, want a clear refusal", err)
	}
	want := MatmulF32 // what CPUID says the fast path should get
	switch {
	case cpu.X86.HasAMXBF16 && cpu.X86.HasAMXTile && AMXAvailable():
		want = MatmulAMX
	case cpu.X86.HasAVX512BF16 && cpu.X86.HasAVX512F:
		want = MatmulAVX512BF16
	}
	if got := FastMatmul(); got != want {
		t.Errorf("auto picks %q for the fast path, CPUID says %q", got, want)
	}
	if got := MatmulAVX512BF16.Available(); got != (cpu.X86.HasAVX512BF16 && cpu.X86.HasAVX512F) {
		t.Errorf("avx512bf16 available %v, CPUID says AVX512_BF16 %v", got, cpu.X86.HasAVX512BF16)
	}
	for _, quant := range []string{"", "q8"} {
		o := Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1, WeightsQuant: engine.WeightsQuant(quant)}
		auto := MatmulF32
		if quant == "q8" {
			auto = want
		}
		if got := openBackend(t, m, o).Matmul(); got != auto {
			t.Errorf("weights %q with no matmul chosen multiplies with %q, want %q", quant, got, auto)
		}
		for _, mm := range Matmuls {
			o.BackendOptions = map[string]string{"matmul": string(mm)}
			expect := mm.resolve(quant == "q8")
			if !mm.Available() {
				_, err := Open("cpu", m, o)
				if err == nil || !strings.Contains(err.Error(), "matmul="+string(mm)+": this CPU") {
					t.Errorf("weights %q, matmul=%s on a CPU without it: %v, want a refusal naming it", quant, mm, err)
				}
				continue
			}
			if got := openBackend(t, m, o).Matmul(); got != expect {
				t.Errorf("weights %q, matmul=%s: Matmul says %q, want %q", quant, mm, got, expect)
			}
		}
	}
}

// TestBF16TokensAgreeWithExact holds each bf16 kernel set's products (bf16 inputs, float32
// sums) in prefill and vision to the exact path on the committed checkpoints, alone and
// with q8 weights: first-step logits within a few percent and not bit-identical (the option
// must take effect), every case's first token (the one the prefill picks) the same. Later
// tokens are not held case by case: on these random width-32 models nearly flat logits let
// one small difference flip a pick and the rest of the sequence with it (q8 and bf16
// products together flip 2 of 3 tiny-f32 cases). The trained bundled model is where whole
// answers are compared (tools/tinymodel TestHeldoutScenesQ8).
func TestBF16TokensAgreeWithExact(t *testing.T) {
	lockThread(t)
	for _, mm := range bf16Matmuls {
		for _, quant := range []string{"bf16", "q8"} {
			for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
				t.Run(string(mm)+"/"+quant+"/"+ckpt, func(t *testing.T) {
					skipUnavailable(t, mm)
					a := compareWithExact(t, ckpt, map[string]string{"weights_quant": quant, "matmul": string(mm)})
					a.checkLogits(t, "the bf16 products")
					if a.firstSame != a.cases {
						t.Errorf("only %d of %d cases pick the exact path's first token", a.firstSame, a.cases)
					}
					if quant == "bf16" && a.same != a.cases {
						t.Errorf("bf16 products alone change the tokens of %d of %d cases", a.cases-a.same, a.cases)
					}
				})
			}
		}
	}
}

// TestBF16VisionNearExact compares the image embeddings of every golden case on the exact
// path and with each bf16 kernel set's products (the vision tower's GEMMs and its
// bidirectional attention): within 2% of the largest value, and not bit-identical, with
// the activations rounded once (split_activations=none). With them split (the default)
// the products lose only the weights' rounding to bf16: on tiny-bf16, whose weights are
// bf16 already, that leaves within 0.3% and at most half as far as rounded once on every
// case; on tiny-f32, whose weights lose bits too, no farther than rounded once.
func TestBF16VisionNearExact(t *testing.T) {
	lockThread(t)
	for _, mm := range bf16Matmuls {
		t.Run(string(mm), func(t *testing.T) {
			skipUnavailable(t, mm)
			for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
				dir, idx := readGoldens(t, ckpt)
				m := openModel(t, filepath.Join(checkpointsDir, ckpt))
				o := Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2}
				exact := openBackend(t, m, o)
				o.BackendOptions = map[string]string{"matmul": string(mm)}
				split := openBackend(t, m, o)
				o.BackendOptions = map[string]string{"matmul": string(mm), "split_activations": "none"}
				once := openBackend(t, m, o)
				for _, c := range idx.Cases {
					patches := readF32(t, dir, c.Files["patches"])
					var emb [3][]float32
					for i, b := range []*Backend{exact, split, once} {
						if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
							t.Fatalf("%s %s: vision: %v", ckpt, c.Name, err)
						}
						data, _, _ := b.ImageEmbeddings()
						emb[i] = data
					}
					dSplit, dOnce := relDiff(emb[1], emb[0]), relDiff(emb[2], emb[0])
					t.Logf("%s %s: image embeddings within %.3g relative (split), %.3g (rounded once)", ckpt, c.Name, dSplit, dOnce)
					if dOnce > 0.02 || dOnce == 0 {
						t.Errorf("%s %s: %s image embeddings, activations rounded once, differ by %.3g relative from the exact path's, want (0, 0.02]", ckpt, c.Name, mm, dOnce)
					}
					limit, share := 0.003, 0.5
					if ckpt == "tiny-f32" {
						limit, share = 0.02, 1
					}
					if dSplit > limit || dSplit == 0 || dSplit > share*dOnce {
						t.Errorf("%s %s: %s image embeddings, activations split, differ by %.3g relative from the exact path's (rounded once: %.3g), want (0, %g] and at most %g of it", ckpt, c.Name, mm, dSplit, dOnce, limit, share)
					}
				}
			}
		})
	}
}

// TestSplitOption: the fast path splits the image's activations unless told otherwise
// (none where the products are float32), and a value outside the three is refused by
// name. What each split does is TestBF16SplitGemm's, TestBF16VisionNearExact's and
// TestSplitAllReachesPrefill's.
func TestSplitOption(t *testing.T) {
	lockThread(t)
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	o := Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1}
	if got := openBackend(t, m, o).Split(); got != SplitNone {
		t.Errorf("the exact path (float32 products) says split %q, want none", got)
	}
	o.WeightsQuant = engine.WeightsQ8
	want := SplitVision
	if FastMatmul() == MatmulF32 {
		want = SplitNone
	}
	if got := openBackend(t, m, o).Split(); got != want {
		t.Errorf("the fast path with no split chosen says %q, want %q", got, want)
	}
	o.BackendOptions = map[string]string{"split_activations": "text"}
	if b, err := Open("cpu", m, o); err == nil {
		b.Close()
		t.Error("split_activations=text: opened, want a refusal")
	} else if !strings.Contains(err.Error(), "split_activations=text: want none, vision or all") {
		t.Errorf("split_activations=text: %v, want the option and its values named", err)
	}
}

// TestSplitAllReachesPrefill: with the checkpoint's bf16 weights (so that only the
// activations' rounding differs from the exact path), splitting prefill's products too
// (split_activations=all) brings the first-step logits of tiny-bf16's golden cases at least
// twice as near the exact path's as rounding once. (Splitting the image's products alone
// moves these logits by less than the cases differ, so TestBF16VisionNearExact holds that
// split on the image embeddings instead.)
func TestSplitAllReachesPrefill(t *testing.T) {
	lockThread(t)
	for _, mm := range bf16Matmuls {
		t.Run(string(mm), func(t *testing.T) {
			skipUnavailable(t, mm)
			errs := map[Split]float64{}
			for _, s := range []Split{SplitNone, SplitAll} {
				a := compareWithExact(t, "tiny-bf16", map[string]string{"matmul": string(mm), "split_activations": string(s)})
				errs[s] = a.maxLogitErr
				t.Logf("split_activations=%s: first-step logits within %.3g relative, %d/%d cases identical", s, a.maxLogitErr, a.same, a.cases)
			}
			if errs[SplitAll] > errs[SplitNone]/2 || errs[SplitAll] == 0 {
				t.Errorf("all split: logits within %.3g of the exact path's, rounded once %.3g: want (0, half of that]", errs[SplitAll], errs[SplitNone])
			}
		})
	}
}

// TestBF16RunDoesNotDependOnThreads: a whole request with each bf16 kernel set's products
// and attention gives the same image embeddings and first-step logits bit for bit on 1, 2
// and 5 threads (the products and the attention split their work differently for each).
func TestBF16RunDoesNotDependOnThreads(t *testing.T) {
	lockThread(t)
	dir, idx := readGoldens(t, "tiny-bf16")
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	c := idx.Cases[len(idx.Cases)-1]
	patches := readF32(t, dir, c.Files["patches"])
	ids := readI32(t, dir, c.Files["prompt_ids"])
	for _, mm := range bf16Matmuls {
		t.Run(string(mm), func(t *testing.T) {
			skipUnavailable(t, mm)
			var first [2][]float32
			for n, threads := range []int{1, 2, 5} {
				b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 512, Threads: threads,
					BackendOptions: map[string]string{"matmul": string(mm), "weights_quant": "q8"}})
				if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
					t.Fatal(err)
				}
				emb, _, _ := b.ImageEmbeddings()
				if _, err := prefill1(b, ids); err != nil {
					t.Fatal(err)
				}
				got := [2][]float32{emb, b.Logits(0)}
				if n == 0 {
					first = got
					continue
				}
				for k, what := range []string{"image embeddings", "first-step logits"} {
					for i := range got[k] {
						if math.Float32bits(got[k][i]) != math.Float32bits(first[k][i]) {
							t.Fatalf("%s: element %d differs between 1 and %d threads", what, i, threads)
						}
					}
				}
			}
		})
	}
}

// BenchmarkBF16AgainstSGEMM times the products of 3B's prefill and vision tower both ways,
// side by side in one run, for every bf16 kernel set this CPU has: bf16 products (AMX tiles
// or AVX512_BF16, packing and rounding included) and cblas_sgemm on weights already
// widened to float32 (what matmul=f32 runs, less its widening). It reports each rate and
// their ratio, the best of five runs each per iteration (docs/cpu-backend.md, Prefill and
// vision on AMX tiles, and without AMX):
//
//	go test -run - -bench BF16AgainstSGEMM -benchtime 1x ./engine/native
func BenchmarkBF16AgainstSGEMM(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, mm := range bf16Matmuls {
		for _, s := range []struct {
			name          string
			n, rows, cols int
			q8            bool
		}{
			{"q-o-295x2048x2048", 295, 2048, 2048, false},
			{"gate-up-q8-295x11008x2048", 295, 11008, 2048, true},
			{"down-q8-300x2048x11008", 300, 2048, 11008, true},
			{"vision-fc0-1024x4304x1152", 1024, 4304, 1152, false},
			{"patch-1024x1152x588", 1024, 1152, 588, false},
		} {
			b.Run(string(mm)+"/"+s.name, func(b *testing.B) {
				skipUnavailable(b, mm)
				w := make([]float32, s.rows*s.cols)
				for i := range w {
					w[i] = (2*rng.Float32() - 1) * 0.05
				}
				dt, raw := checkpoint.BF16, []byte(nil)
				if s.q8 {
					dt, raw = q8dtype, q8Quantize(w, s.cols)
				} else {
					raw, _ = encodeRow(w, checkpoint.BF16)
				}
				x := make([]float32, s.n*s.cols)
				for i := range x {
					x[i] = 2*rng.Float32() - 1
				}
				var bf, sgemm float64
				for range b.N {
					_, ta, err := bf16GemmProbe(mm, false, dt, raw, s.rows, s.cols, x, s.n, 2, 5)
					if err != nil {
						b.Fatal(err)
					}
					_, ts, err := sgemmProbe(dt, raw, s.rows, s.cols, x, s.n, 5)
					if err != nil {
						b.Fatal(err)
					}
					bf, sgemm = max(bf, 1/ta), max(sgemm, 1/ts)
				}
				flop := 2 * float64(s.n) * float64(s.rows) * float64(s.cols)
				b.ReportMetric(flop*bf/1e9, "bf16-GFLOP/s")
				b.ReportMetric(flop*sgemm/1e9, "sgemm-GFLOP/s")
				b.ReportMetric(bf/sgemm, "bf16/sgemm")
			})
		}
	}
}
