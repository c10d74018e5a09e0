package native

import (
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
