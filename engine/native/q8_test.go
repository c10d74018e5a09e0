package native

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
)

// Tests of LA_WEIGHTS_QUANT=q8: the int8 format, its kernels against a plain float64
// reference, and the engine's tokens against the exact bf16 path.

// q8Rows quantizes random weights (some blocks all zero, some with one outlier) and
// returns them with their q8 form.
func q8Rows(rng *rand.Rand, rows, n int) ([]float32, []byte) {
	w := make([]float32, rows*n)
	for i := range w {
		w[i] = 2*rng.Float32() - 1
	}
	if len(w) >= 3*q8Block {
		clear(w[q8Block : 2*q8Block]) // an all-zero block: scale 0, quants 0
		w[2*q8Block+5] = 40           // an outlier: its block's other weights lose precision
	}
	return w, q8Quantize(w, n)
}

func TestQ8FormatRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, n = 5, 256
	w, _ := q8Rows(rng, rows, n)
	// a block whose largest weight is 127, so that halves are exact ties: 2.5 must go to 3
	// and -2.5 to -3 (away from zero), 0.5 to 1
	copy(w[3*q8Block:], []float32{127, 2.5, -2.5, 0.5, -0.5, 126.5})
	q := q8Quantize(w, n)
	if len(q) != rows*(n+n/q8Block*4) || q8RowBytes(n) != n*9/8 {
		t.Fatalf("q8 rows of %d weights take %d bytes, want %d (9/8 bytes a weight)", n, q8RowBytes(n), n*9/8)
	}
	back := q8Dequantize(q, n)
	for r := range rows {
		row := q[r*q8RowBytes(n):]
		for b := range n / q8Block {
			scale := math.Float32frombits(binary.LittleEndian.Uint32(row[4*b:]))
			block := w[r*n+b*q8Block : r*n+(b+1)*q8Block]
			var amax float32
			for _, v := range block {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			if scale != amax/127 {
				t.Fatalf("row %d block %d: scale %g, want max|w|/127 = %g", r, b, scale, amax/127)
			}
			hit127 := amax == 0
			for i, v := range block {
				k := r*n + b*q8Block + i
				quant := int8(row[n/q8Block*4+b*q8Block+i])
				if quant == 127 || quant == -127 {
					hit127 = true
				}
				if scale > 0 { // nearest integer, ties away from zero, of w / scale in float32
					inv := 1 / scale
					if want := math.Max(-127, math.Min(127, math.Round(float64(v*inv)))); float64(quant) != want {
						t.Fatalf("weight %d: %g / %g quantized to %d, want %g", k, v, scale, quant, want)
					}
				}
				if back[k] != float32(quant)*scale {
					t.Fatalf("weight %d: dequantized %g, want quant %d x scale %g", k, back[k], quant, scale)
				}
				if d := math.Abs(float64(back[k] - v)); d > float64(scale)/2*(1+1e-6) {
					t.Fatalf("weight %d: %g came back as %g, more than half a scale (%g) off", k, v, back[k], scale)
				}
			}
			if !hit127 {
				t.Errorf("row %d block %d: the largest weight is not quantized to +-127", r, b)
			}
		}
	}
	// Quantizing the dequantized weights gives the same bytes: the format is a fixed point.
	if again := q8Quantize(back, n); string(again) != string(q) {
		t.Error("quantizing the dequantized rows changed them")
	}
}

// TestQ8QuantizersAgree: the quantizer open uses (AVX-512 here) writes the plain C one's
// bytes exactly, on weights with exact ties, an all-zero block, outliers, tiny and huge
// magnitudes.
func TestQ8QuantizersAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, n = 64, 256
	w := make([]float32, rows*n)
	for b := range len(w) / q8Block {
		block := w[b*q8Block : (b+1)*q8Block]
		for i := range block {
			switch b % 5 {
			case 0: // the largest weight 127 makes the scale exactly 1: every x.5 is a tie
				block[i] = float32(rng.IntN(254)-127) + 0.5
				block[0] = 127
			case 1:
				block[i] = float32(rng.NormFloat64()) * 1e-30
			case 2:
				block[i] = float32(rng.NormFloat64()) * 1e30
			case 3: // zeros, and blocks the scale can not invert: an infinity, a NaN, a subnormal scale
				block[i] = 0
				switch b % 4 {
				case 1:
					block[i%3] = float32(math.Inf(1 - 2*(i%2)))
				case 2:
					block[i%5] = float32(math.NaN())
				case 3:
					block[i%4] = 1e-37
				}
			default:
				block[i] = float32(rng.NormFloat64())
			}
		}
	}
	if got, want := q8Quantize(w, n), q8QuantizePlain(w, n); !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("byte %d of the q8 rows: %d, the plain quantizer writes %d", i, got[i], want[i])
			}
		}
	}
}

// TestQ8KernelsMatchReference checks every kernel set's int8 product against the float64
// dot product of the dequantized weights, and that batching and neighbouring rows never
// change its bits.
func TestQ8KernelsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{32, 96, 2048, 2080} {
		const rows, nx = 9, 16
		_, q := q8Rows(rng, rows, n)
		exact := q8Dequantize(q, n)
		x := make([]float32, nx*n)
		for i := range x {
			x[i] = 2*rng.Float32() - 1
		}
		for _, set := range kernelSets {
			what := fmt.Sprintf("q8 n=%d %s kernels", n, set)
			if _, isa := dotProbe(set, q8dtype, q[:q8RowBytes(n)], x[:n]); isa == "none" {
				continue // no AVX2 on this CPU
			}
			all := rowsProbe(set, q8dtype, q, rows, n, x)
			for r := range rows {
				for c := range nx {
					var want, mag float64
					for i := range n {
						p := float64(exact[r*n+i]) * float64(x[c*n+i])
						want += p
						mag += math.Abs(p)
					}
					if d := math.Abs(float64(all[c*rows+r]) - want); d > 1e-6*mag+1e-6 {
						t.Errorf("%s: row %d . x%d = %g, exact %g", what, r, c, all[c*rows+r], want)
					}
				}
			}
			for _, k := range []int{1, 2, 3, 5, 8} {
				part := rowsProbe(set, q8dtype, q, rows, n, x[(nx-k)*n:])
				for c := range k {
					for r := range rows {
						if got, ref := part[c*rows+r], all[(nx-k+c)*rows+r]; math.Float32bits(got) != math.Float32bits(ref) {
							t.Fatalf("%s: row %d . x%d is %g in a batch of %d, %g in a batch of %d", what, r, nx-k+c, got, k, ref, nx)
						}
					}
				}
			}
			part := rowsProbe(set, q8dtype, q[2*q8RowBytes(n):], rows-2, n, x)
			for c := range nx {
				for r := range rows - 2 {
					if math.Float32bits(part[c*(rows-2)+r]) != math.Float32bits(all[c*rows+r+2]) {
						t.Fatalf("%s: row %d . x%d changes with the rows computed next to it", what, r+2, c)
					}
				}
			}
		}
	}
}

func TestQ8OptionIsValidated(t *testing.T) {
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	_, err := Open("cpu", m, Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1,
		BackendOptions: map[string]string{"weights_quant": "q4"}})
	if err == nil || !strings.Contains(err.Error(), "weights_quant=q4: want bf16 or q8") {
		t.Fatalf("open with weights_quant=q4: %v, want a clear refusal", err)
	}
}

// q8Agreement is how the int8 path compares with the exact one on a checkpoint's golden
// cases.
type q8Agreement struct {
	cases, same  int     // cases, and those whose greedy tokens all equal the exact path's
	firstSame    int     // cases whose first greedy token (from the prefill) equals the exact path's
	tokens, diff int     // greedy tokens compared, and those that differ
	maxLogitErr  float64 // the largest first-step relDiff of the logits
}

// checkLogits logs the agreement and holds the first-step logits within 5% of the exact
// path's, and not equal to them bit for bit (what, the lossy change, must be in use).
func (a q8Agreement) checkLogits(t *testing.T, what string) {
	t.Helper()
	t.Logf("%d/%d cases identical, %d/%d tokens differ, first-step logits within %.3g relative",
		a.same, a.cases, a.diff, a.tokens, a.maxLogitErr)
	if a.maxLogitErr > 0.05 {
		t.Errorf("first-step logits differ from the exact path by %.3g relative, want under 0.05", a.maxLogitErr)
	}
	if a.maxLogitErr == 0 {
		t.Errorf("logits equal the exact path's bit for bit: %s are not in use", what)
	}
}

// compareQ8 runs every golden case of ckpt on the exact path and on q8 weights through
// the given kernel set.
func compareQ8(t *testing.T, ckpt string, kernels string) q8Agreement {
	return compareWithExact(t, ckpt, map[string]string{"weights_quant": "q8", "kernels": kernels})
}

// compareWithExact runs every golden case of ckpt on the exact path and on a backend
// opened with the given options (a lossy path: q8 weights, AMX products).
func compareWithExact(t *testing.T, ckpt string, options map[string]string) q8Agreement {
	t.Helper()
	dir, idx := readGoldens(t, ckpt)
	m := openModel(t, filepath.Join(checkpointsDir, ckpt))
	o := Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2}
	exact := openBackend(t, m, o)
	o.BackendOptions = options
	q8 := openBackend(t, m, o)
	var a q8Agreement
	for _, c := range idx.Cases {
		patches := readF32(t, dir, c.Files["patches"])
		ids := readI32(t, dir, c.Files["prompt_ids"])
		run := func(b *Backend) ([]int32, []float32) {
			if err := b.Reset(); err != nil {
				t.Fatal(err)
			}
			if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
				t.Fatalf("%s: vision: %v", c.Name, err)
			}
			tok, err := prefill1(b, ids)
			if err != nil {
				t.Fatalf("%s: prefill: %v", c.Name, err)
			}
			logits := append([]float32(nil), b.Logits(0)...)
			got := []int32{tok}
			for len(got) < len(c.GreedyIDs) {
				if tok, err = decode1(b, tok); err != nil {
					t.Fatalf("%s: decode: %v", c.Name, err)
				}
				got = append(got, tok)
			}
			return got, logits
		}
		want, wantLogits := run(exact)
		got, gotLogits := run(q8)
		a.cases++
		if got[0] == want[0] {
			a.firstSame++
		}
		same := true
		for i := range want {
			a.tokens++
			if got[i] != want[i] {
				a.diff++
				same = false
			}
		}
		if same {
			a.same++
		}
		a.maxLogitErr = max(a.maxLogitErr, relDiff(gotLogits, wantLogits))
	}
	return a
}

// TestQ8TokensAgreeWithBF16 holds the int8 path to the exact one on the committed
// checkpoints, on every kernel set: most cases' greedy tokens identical, the first-step
// logits within a few percent.
func TestQ8TokensAgreeWithBF16(t *testing.T) {
	lockThread(t)
	for _, kernels := range []string{"auto", "avx2", "plain"} {
		for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
			t.Run(kernels+"/"+ckpt, func(t *testing.T) {
				m := openModel(t, filepath.Join(checkpointsDir, ckpt))
				openKernels(t, m, Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1}, kernels) // skips without the ISA
				a := compareQ8(t, ckpt, kernels)
				a.checkLogits(t, "the int8 weights")
				if 2*a.same <= a.cases {
					t.Errorf("only %d of %d cases decode the same tokens as the exact path", a.same, a.cases)
				}
			})
		}
	}
}

// TestQ8StepBatchedMatchesAlone runs parallel box decoding's step on int8 weights: every
// slot's rows are the same bit for bit alone or batched with others (the step's products
// go through the same q8 kernels as decode), on every kernel set.
func TestQ8StepBatchedMatchesAlone(t *testing.T) {
	lockThread(t)
	for _, kernels := range []string{"auto", "avx2", "plain"} {
		t.Run(kernels, func(t *testing.T) {
			m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
			openKernels(t, m, Options{MaxBatch: 1, MaxSeqLen: 64, Threads: 1}, kernels) // skips without the ISA
			checkStepBatched(t, m.Config.Text.Vocab, batchSpecs(t, "tiny-bf16"), func(o Options) *Backend {
				o.WeightsQuant = "q8"
				o.BackendOptions = map[string]string{"kernels": kernels}
				return openBackend(t, m, o)
			})
		})
	}
}
