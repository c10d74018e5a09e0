package native

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkDecodeProb measures what the chosen token's probability costs a decode step
// alone: the pipeline always asks for it (the scores are made of it), and the softmax sum
// is one more pass over the vocabulary's logits per token. Steps with and without it
// alternate on one sequence, so both see the same machine; it reports each one's time and
// the extra as a percentage. On tiny-bf16 the vocabulary is Qwen2's 152681 tokens, as on
// the 3B model, behind a tiny network: the worst case for the extra pass's share. On the
// bundled model (1424 tokens) it is what the default service pays. docs/scores.md has the
// figures.
func BenchmarkDecodeProb(b *testing.B) {
	shapesPrompt := make([]int32, 40) // ids below the bundled model's 1424, no image token
	for i := range shapesPrompt {
		shapesPrompt[i] = int32(20 + i)
	}
	for _, c := range []struct {
		name, dir string
		prompt    []int32
	}{
		{"tiny-bf16", filepath.Join(checkpointsDir, "tiny-bf16"), testPrompt(0)},
		{"tiny-shapes", "../../models/tiny-shapes", shapesPrompt},
	} {
		b.Run(c.name, func(b *testing.B) {
			lockThread(b)
			m := openModel(b, c.dir)
			be := openBackend(b, m, Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2})
			tok, err := prefill1(be, c.prompt)
			if err != nil {
				b.Fatal(err)
			}
			slots, toks, next, prob := []int{0}, []int32{tok}, []int32{0}, []float32{0}
			var plain, withProb time.Duration
			steps := 0
			step := func(p []float32) time.Duration {
				start := time.Now()
				if err := decodeStep(be, slots, toks, next, p); err != nil {
					b.Fatal(err)
				}
				took := time.Since(start)
				toks[0] = next[0]
				steps++
				return took
			}
			for b.Loop() {
				if len(c.prompt)+steps+2 >= be.MaxSeqLen() {
					b.StopTimer()
					if err := be.Release(0); err != nil {
						b.Fatal(err)
					}
					if toks[0], err = prefill1(be, c.prompt); err != nil {
						b.Fatal(err)
					}
					steps = 0
					b.StartTimer()
				}
				plain += step(nil)
				withProb += step(prob)
			}
			n := float64(b.N)
			b.ReportMetric(float64(plain.Nanoseconds())/n, "ns/step")
			b.ReportMetric(float64(withProb.Nanoseconds())/n, "ns/step-prob")
			b.ReportMetric(100*(float64(withProb)/float64(plain)-1), "%extra")
			b.ReportMetric(0, "ns/op")
		})
	}
}
