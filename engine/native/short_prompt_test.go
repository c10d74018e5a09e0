package native

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestShortPromptsRunAsDecode: on the fast path a prompt of at most short_prompt_rows
// tokens (16 by default) runs its products as a decode step does instead of converting
// every weight for a GEMM. Checked on the q8 weights for every products kernel set this CPU
// has: a 12-token prompt's first-step logits change when the option is 0 (the choice takes
// effect) and stay near the exact path's either way; a 17-token prompt's are bit for bit
// the same with and without it (the GEMM runs as before). The option's bounds are refused
// by name.
func TestShortPromptsRunAsDecode(t *testing.T) {
	lockThread(t)
	m := openModel(t, filepath.Join(checkpointsDir, "tiny-bf16"))
	o := Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2}
	exact := openBackend(t, m, o)
	prompt := testPrompt(0)
	for _, mm := range append([]Matmul{MatmulF32}, bf16Matmuls...) {
		t.Run(string(mm), func(t *testing.T) {
			skipUnavailable(t, mm)
			first := func(b *Backend, n int) []float32 {
				t.Helper()
				if err := b.Reset(); err != nil {
					t.Fatal(err)
				}
				if _, err := prefill1(b, prompt[:n]); err != nil {
					t.Fatalf("prefill of %d tokens: %v", n, err)
				}
				return append([]float32(nil), b.Logits(0)...)
			}
			withRows := func(rows string) *Backend {
				q := o
				q.BackendOptions = map[string]string{"weights_quant": "q8", "matmul": string(mm), "short_prompt_rows": rows}
				return openBackend(t, m, q)
			}
			short, gemm := withRows("16"), withRows("0")
			for _, n := range []int{12, 17} {
				want := first(exact, n)
				a, b := first(short, n), first(gemm, n)
				same := true
				for i := range a {
					same = same && math.Float32bits(a[i]) == math.Float32bits(b[i])
				}
				if n <= 16 && same {
					t.Errorf("%d tokens: short_prompt_rows=16 gives the GEMM's logits bit for bit; the decode products did not run", n)
				}
				if n > 16 && !same {
					t.Errorf("%d tokens: short_prompt_rows=16 changed a long prompt's logits", n)
				}
				for name, got := range map[string][]float32{"short": a, "gemm": b} {
					if d := relDiff(got, want); d > 0.05 {
						t.Errorf("%d tokens, %s: first-step logits %.3g relative from the exact path's, want <= 0.05", n, name, d)
					}
				}
			}
		})
	}
	for _, bad := range []string{"17", "-1", "x"} {
		q := o
		q.BackendOptions = map[string]string{"weights_quant": "q8", "short_prompt_rows": bad}
		if b, err := Open("cpu", m, q); err == nil {
			b.Close()
			t.Errorf("short_prompt_rows=%s: opened, want a refusal", bad)
		} else if !strings.Contains(err.Error(), "short_prompt_rows") {
			t.Errorf("short_prompt_rows=%s: %v, want the option named", bad, err)
		}
	}
}
