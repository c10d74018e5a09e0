package native

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
)

// BenchmarkBlockStep measures what a block step of parallel box decoding costs against a
// decode step: per iteration, one decode step of B slots and one Step of the same B slots
// with one pending token and a block of six rows each (the common hybrid step), each timed
// on its own. It reports the median of each and the median of the per-iteration ratios
// ("a block step costs x decode steps"): the two alternate, so both see the same machine,
// which on a shared one matters more than any mean.
//
// It runs on tiny-bf16, and on a full-size checkpoint when LA_BENCH_3B names its
// directory (the random 3B one of docs/cpu-backend.md; run it under
// `flock ${TMPDIR:-/tmp}/bench3b.lock`, with -benchtime 10x: a block step at batch 8 takes seconds).
func BenchmarkBlockStep(b *testing.B) {
	models := []struct{ name, dir string }{{"tiny-bf16", filepath.Join(checkpointsDir, "tiny-bf16")}}
	if dir := os.Getenv("LA_BENCH_3B"); dir != "" {
		models = append(models, struct{ name, dir string }{"3b", dir})
	}
	for _, mc := range models {
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/B=%d", mc.name, n), func(b *testing.B) { benchBlockStep(b, mc.dir, n) })
		}
	}
}

func benchBlockStep(b *testing.B, dir string, n int) {
	lockThread(b)
	m := openModel(b, dir)
	be := openBackend(b, m, Options{MaxBatch: n, MaxSeqLen: 256, Threads: 2})
	const mask = 151676 // <text_mask> of the real vocabulary, which tiny-bf16 shares
	prompt := testPrompt(0)
	slots := make([]int, n)
	tokens, next := make([]int32, n), make([]int32, n)
	prob := make([]float32, n) // the service always asks for the token's probability
	steps := make([]engine.StepSlot, n)
	rows := engine.NewStepRows(6*n, 5, 2)
	watch := []int32{151668, 152678}
	fill := func() {
		for s := range n {
			if err := be.Release(s); err != nil {
				b.Fatal(err)
			}
			tok, _, err := prefillStep(be, s, prompt)
			if err != nil {
				b.Fatal(err)
			}
			slots[s], tokens[s] = s, tok
		}
	}
	fill()
	pos := len(prompt)
	var decode, block, ratio []float64
	for b.Loop() {
		if pos+2+6 > be.MaxSeqLen() { // each iteration keeps two tokens per slot
			b.StopTimer()
			fill()
			pos = len(prompt)
			b.StartTimer()
		}
		start := time.Now()
		if err := decodeStep(be, slots, tokens, next, prob); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		for s := range n {
			steps[s] = engine.StepSlot{Slot: s, Pending: next[s : s+1],
				Block: []int32{next[s], mask, mask, mask, mask, mask}}
		}
		if err := be.Step(steps, 5, watch, rows); err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		for s := range n {
			tokens[s] = rows[6*s].TopIDs[0] // the block's first row: any id will do
		}
		pos += 2
		d, k := mid.Sub(start).Seconds()*1e3, end.Sub(mid).Seconds()*1e3
		decode, block, ratio = append(decode, d), append(block, k), append(ratio, k/d)
	}
	b.ReportMetric(median(decode), "decode-ms")
	b.ReportMetric(median(block), "block-ms")
	b.ReportMetric(median(ratio), "x-decode")
	b.ReportMetric(0, "ns/op")
}

// median is the middle value (the mean of the two middle ones for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
