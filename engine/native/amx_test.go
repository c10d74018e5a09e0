package native

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
)

// bf16Value is f rounded to bfloat16 (nearest-even), as a float32.
func bf16Value(f float32) float32 { return math.Float32frombits(uint32(bf16Bits(f)) << 16) }

func skipWithoutAMX(t *testing.T) {
	t.Helper()
	if !AMXAvailable() {
		t.Skip("this CPU or kernel has no AMX (bf16 tiles); the matmul=amx path can not run here")
	}
}

// TestAMXGemmMatchesBF16Reference holds the AMX product to a float64 sum of the same bf16
// inputs, for every weight dtype (q8 included) and for shapes that leave partial tiles
// in every direction; and the result must not depend on the number of threads (1 to 7,
// so that some shapes have fewer weight panels than threads).
func TestAMXGemmMatchesBF16Reference(t *testing.T) {
	skipWithoutAMX(t)
	rng := rand.New(rand.NewPCG(7, 17))
	shapes := []struct{ n, rows, cols int }{
		{1, 1, 1}, {1, 17, 5}, {3, 129, 64}, {17, 33, 100}, {32, 128, 32}, {33, 200, 96},
		{70, 300, 288}, {295, 257, 608},
	}
	for _, dt := range []checkpoint.DType{checkpoint.F32, checkpoint.BF16, checkpoint.F16, q8dtype} {
		for _, s := range shapes {
			if dt == q8dtype && s.cols%q8Block != 0 {
				continue
			}
			w := make([]float32, s.rows*s.cols)
			for i := range w {
				w[i] = (2*rng.Float32() - 1) * 0.5
			}
			var raw []byte
			exact := make([]float32, len(w)) // the weights as stored
			if dt == q8dtype {
				raw = q8Quantize(w, s.cols)
				exact = q8Dequantize(raw, s.cols)
			} else {
				raw, exact = encodeRow(w, dt)
			}
			x := make([]float32, s.n*s.cols)
			for i := range x {
				x[i] = 4*rng.Float32() - 2
			}
			got, _, err := amxGemmProbe(dt, raw, s.rows, s.cols, x, s.n, 2, 1)
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
			for _, threads := range []int{1, 3, 7} { // fewer panels than threads split the rows too
				other, _, err := amxGemmProbe(dt, raw, s.rows, s.cols, x, s.n, threads, 1)
				if err != nil {
					t.Fatal(err)
				}
				for i := range other {
					if math.Float32bits(other[i]) != math.Float32bits(got[i]) {
						t.Fatalf("dtype %d, %v: element %d differs between %d threads and two", dt, s, i, threads)
					}
				}
			}
		}
	}
}

// TestAMXMatmulOption checks the option's refusals and that the q8 fast path picks AMX by
// itself where the CPU has it (and says so through Matmul), while the exact path never
// does.
func TestAMXMatmulOption(t *testing.T) {
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	o := Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1}
	_, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1,
		BackendOptions: map[string]string{"matmul": "bf16"}})
	if err == nil || !strings.Contains(err.Error(), "matmul=bf16: want f32 or amx") {
		t.Fatalf("open with matmul=bf16: %v, want a clear refusal", err)
	}
	if got := openBackend(t, m, o).Matmul(); got != "f32" {
		t.Errorf("exact path multiplies with %q, want f32", got)
	}
	o.WeightsQuant = "q8"
	want := MatmulF32
	if AMXAvailable() {
		want = MatmulAMX
	}
	if got := openBackend(t, m, o).Matmul(); got != want {
		t.Errorf("q8 path multiplies with %q on this machine, want %q", got, want)
	}
	o.BackendOptions = map[string]string{"matmul": "f32"}
	if got := openBackend(t, m, o).Matmul(); got != "f32" {
		t.Errorf("q8 with matmul=f32 chosen multiplies with %q, want f32", got)
	}
}

// TestAMXTokensAgreeWithExact holds the AMX products (bf16 inputs, float32 sums) in
// prefill and vision to the exact path on the committed checkpoints, alone and with q8
// weights: first-step logits within a few percent and not bit-identical (the option must
// take effect), every case's first token (the one the prefill picks) the same. Later
// tokens are not held case by case: on these random width-32 models nearly flat logits let
// one small difference flip a pick and the rest of the sequence with it (q8 and AMX
// together flip 2 of 3 tiny-f32 cases). The trained bundled model is where whole answers
// are compared (tools/tinymodel TestHeldoutScenesQ8).
func TestAMXTokensAgreeWithExact(t *testing.T) {
	skipWithoutAMX(t)
	lockThread(t)
	for _, quant := range []string{"bf16", "q8"} {
		for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
			t.Run(quant+"/"+ckpt, func(t *testing.T) {
				a := compareWithExact(t, ckpt, map[string]string{"weights_quant": quant, "matmul": "amx"})
				a.checkLogits(t, "the AMX products")
				if a.firstSame != a.cases {
					t.Errorf("only %d of %d cases pick the exact path's first token", a.firstSame, a.cases)
				}
				if quant == "bf16" && a.same != a.cases {
					t.Errorf("AMX products alone change the tokens of %d of %d cases", a.cases-a.same, a.cases)
				}
			})
		}
	}
}

// TestAMXVisionNearExact compares the image embeddings of every golden case on the exact
// path and with AMX products (the vision tower's GEMMs and its bidirectional attention):
// within 2% of the largest value, and not bit-identical.
func TestAMXVisionNearExact(t *testing.T) {
	skipWithoutAMX(t)
	lockThread(t)
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		dir, idx := readGoldens(t, ckpt)
		m := openModel(t, filepath.Join(checkpointsDir, ckpt))
		o := Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2}
		exact := openBackend(t, m, o)
		o.BackendOptions = map[string]string{"matmul": "amx"}
		amx := openBackend(t, m, o)
		for _, c := range idx.Cases {
			patches := readF32(t, dir, c.Files["patches"])
			var emb [2][]float32
			for i, b := range []*Backend{exact, amx} {
				if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
					t.Fatalf("%s %s: vision: %v", ckpt, c.Name, err)
				}
				data, _, _ := b.ImageEmbeddings()
				emb[i] = data
			}
			d := relDiff(emb[1], emb[0])
			t.Logf("%s %s: image embeddings within %.3g relative", ckpt, c.Name, d)
			if d > 0.02 || d == 0 {
				t.Errorf("%s %s: AMX image embeddings differ by %.3g relative from the exact path's, want (0, 0.02]", ckpt, c.Name, d)
			}
		}
	}
}

// TestAMXRunDoesNotDependOnThreads: a whole request with AMX products and attention gives
// the same image embeddings and first-step logits bit for bit on 1, 2 and 5 threads (the
// products and the attention split their work differently for each).
func TestAMXRunDoesNotDependOnThreads(t *testing.T) {
	skipWithoutAMX(t)
	lockThread(t)
	dir, idx := readGoldens(t, "tiny-bf16")
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	c := idx.Cases[len(idx.Cases)-1]
	patches := readF32(t, dir, c.Files["patches"])
	ids := readI32(t, dir, c.Files["prompt_ids"])
	var first [2][]float32
	for n, threads := range []int{1, 2, 5} {
		b := openBackend(t, m, Options{MaxBatch: 1, MaxSeqLen: 512, Threads: threads,
			BackendOptions: map[string]string{"matmul": "amx", "weights_quant": "q8"}})
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
}

// BenchmarkAMXAgainstSGEMM times the products of 3B's prefill and vision tower both ways,
// side by side in one run: on AMX tiles (matmul=amx, packing and rounding included) and
// through cblas_sgemm on weights already widened to float32 (what matmul=f32 runs, less
// its widening). It reports each rate and their ratio, the best of five runs each per
// iteration (docs/cpu-backend.md, Prefill and vision on AMX tiles):
//
//	go test -run - -bench AMXAgainstSGEMM -benchtime 1x ./engine/native
func BenchmarkAMXAgainstSGEMM(b *testing.B) {
	if !AMXAvailable() {
		b.Skip("this CPU or kernel has no AMX (bf16 tiles)")
	}
	rng := rand.New(rand.NewPCG(1, 2))
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
		b.Run(s.name, func(b *testing.B) {
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
			var amx, sgemm float64
			for range b.N {
				_, ta, err := amxGemmProbe(dt, raw, s.rows, s.cols, x, s.n, 2, 5)
				if err != nil {
					b.Fatal(err)
				}
				_, ts, err := sgemmProbe(dt, raw, s.rows, s.cols, x, s.n, 5)
				if err != nil {
					b.Fatal(err)
				}
				amx, sgemm = max(amx, 1/ta), max(sgemm, 1/ts)
			}
			flop := 2 * float64(s.n) * float64(s.rows) * float64(s.cols)
			b.ReportMetric(flop*amx/1e9, "amx-GFLOP/s")
			b.ReportMetric(flop*sgemm/1e9, "sgemm-GFLOP/s")
			b.ReportMetric(amx/sgemm, "amx/sgemm")
		})
	}
}
