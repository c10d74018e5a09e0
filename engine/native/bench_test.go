package native

import (
	"fmt"
	"path/filepath"
	"testing"
)

// Benchmarks on the committed tiny-bf16 checkpoint: they track the fixed costs around the
// kernels (dispatch, widening, attention bookkeeping). Full-size figures come from
// `worker bench` (docs/cpu-backend.md).

func benchBackend(b *testing.B) *Backend {
	lockThread(b)
	m := openModel(b, filepath.Join(checkpointsDir, "tiny-bf16"))
	return openBackend(b, m, Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2})
}

func BenchmarkVision14x20(b *testing.B) {
	be := benchBackend(b)
	patches := testPatches(14, 20, 1)
	for b.Loop() {
		if err := be.Vision(patches, 14, 20); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPrefill(b *testing.B) {
	be := benchBackend(b)
	if err := be.Vision(testPatches(14, 20, 1), 14, 20); err != nil {
		b.Fatal(err)
	}
	ids := testPrompt(70)
	b.ReportMetric(float64(len(ids)), "tokens/op")
	for b.Loop() {
		if _, err := prefill1(be, ids); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := be.Release(0); err != nil {
			b.Fatal(err)
		}
		if err := be.Vision(testPatches(14, 20, 1), 14, 20); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkDecodeStep(b *testing.B) {
	be := benchBackend(b)
	ids := testPrompt(0)
	tok, err := prefill1(be, ids)
	if err != nil {
		b.Fatal(err)
	}
	steps := 0
	for b.Loop() {
		if len(ids)+steps+1 >= be.MaxSeqLen() {
			b.StopTimer()
			if err := be.Release(0); err != nil {
				b.Fatal(err)
			}
			if tok, err = prefill1(be, ids); err != nil {
				b.Fatal(err)
			}
			steps = 0
			b.StartTimer()
		}
		if tok, err = decode1(be, tok); err != nil {
			b.Fatal(err)
		}
		steps++
	}
}

// BenchmarkDecodeBatch times one decode step of B sequences together; tokens/s is the
// aggregate rate. On the tiny model the per-row work (the LM head over the real
// 152681-token vocabulary and picking the token) dominates, so the ratios are far from
// the full model's (docs/cpu-backend.md, "Batched decode").
func BenchmarkDecodeBatch(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("B=%d", n), func(b *testing.B) {
			lockThread(b)
			m := openModel(b, filepath.Join(checkpointsDir, "tiny-bf16"))
			be := openBackend(b, m, Options{MaxBatch: n, MaxSeqLen: 512, Threads: 2})
			ids := testPrompt(0)
			slots := make([]int, n)
			tokens := make([]int32, n)
			next := make([]int32, n)
			fill := func() {
				for s := range n {
					if err := be.Release(s); err != nil {
						b.Fatal(err)
					}
					tok, _, err := prefillStep(be, s, ids[:len(ids)-s%3]) // prompts of three lengths
					if err != nil {
						b.Fatal(err)
					}
					slots[s], tokens[s] = s, tok
				}
			}
			fill()
			steps := 0
			for b.Loop() {
				if len(ids)+steps+1 >= be.MaxSeqLen() {
					b.StopTimer()
					fill()
					steps = 0
					b.StartTimer()
				}
				if err := decodeStep(be, slots, tokens, next, nil); err != nil {
					b.Fatal(err)
				}
				copy(tokens, next)
				steps++
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
