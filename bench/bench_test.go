package bench

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/native"
	"github.com/locateanything/detect/internal/cli"
)

func TestBenchReportsEveryStage(t *testing.T) {
	var out bytes.Buffer
	err := Run([]string{"--weights", "../testdata/checkpoints/tiny-bf16", "--grid", "8x10",
		"--prompt", "40", "--tokens", "4", "--runs", "1", "--warmup=false", "--stream-mib", "8", "--threads", "2"}, Defaults{Settings: engine.Settings{MaxSeqLen: 96}}, &out)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	report := out.String()
	t.Log("\n" + report)
	// The tiny checkpoint's vision and prefill are a few MFLOP: on a loaded machine their
	// rate prints as 0.0 GFLOP/s, so there the time is what must be positive.
	for _, want := range []struct {
		line    string
		pattern string
	}{
		{"machine", `triad ([0-9.]+) GB/s`},
		{"kernel", `bf16 matrix-vector alone, .*: ([0-9.]+) GB/s`},
		{"vision", `grid 8x10 \(80 patches, 20 image tokens\): ([0-9.]+) ms, [0-9.]+ GFLOP/s`},
		{"prefill", `40 tokens: ([0-9.]+) ms, [0-9.]+ GFLOP/s`},
		{"decode", `4 tokens: [0-9.]+ ms, ([0-9.]+) tokens/s`},
		{"decode", `([0-9]+)% of ceiling`},
		{"decode/run", `decode per run at ([0-9]+)% of that run's ceiling`},
		{"decode/p10", `10th-percentile step [0-9.]+ ms = ([0-9.]+) tokens/s`},
	} {
		m := regexp.MustCompile(want.pattern).FindStringSubmatch(report)
		if m == nil {
			t.Errorf("%s line: no match for %q", want.line, want.pattern)
			continue
		}
		if v, err := strconv.ParseFloat(m[1], 64); err != nil || v <= 0 {
			t.Errorf("%s line: figure %q is not a positive number", want.line, m[1])
		}
	}
	if !strings.Contains(report, "bf16") {
		t.Error("report does not name the weights' dtype")
	}
	if !strings.Contains(report, "KV cache 96 positions per sequence") { // Defaults.MaxSeqLen: LA_MAX_SEQ_LEN
		t.Error("report does not give the KV cache the backend was opened with (96 positions)")
	}
}

// TestBenchQ8 runs the stages on int8 weights: the report names them, measures the int8
// kernel, counts 9/8 bytes a weight per token (tiny-bf16: every decoder matrix and the
// tied head have rows of whole blocks) and gives the process's memory.
func TestBenchQ8(t *testing.T) {
	args := []string{"--weights", "../testdata/checkpoints/tiny-bf16", "--grid", "8x10", "--prompt", "40",
		"--tokens", "4", "--runs", "1", "--warmup=false", "--stream-mib", "8", "--threads", "2"}
	bytesPerToken := func(report string) float64 {
		m := regexp.MustCompile(`([0-9.]+) GB weights/token`).FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("no weights/token figure in\n%s", report)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var bf16, q8 bytes.Buffer
	if err := Run(args, Defaults{}, &bf16); err != nil {
		t.Fatalf("bench: %v", err)
	}
	if err := Run(append(args, "--quant", "q8"), Defaults{}, &q8); err != nil {
		t.Fatalf("bench --quant q8: %v", err)
	}
	report := q8.String()
	t.Log("\n" + report)
	for _, want := range []string{
		`decoder weights q8`,
		`kernel/q8 +int8 matrix-vector alone, .*: [0-9.]+ GB/s`,
		`memory +resident [0-9.]+ GB \(anonymous [0-9.]+ GB, file pages [0-9.]+ GB\) after the runs; peak [0-9.]+ GB`,
		`total +vision \+ prefill \+ decode [0-9.]+ ms`,
	} {
		if !regexp.MustCompile(want).MatchString(report) {
			t.Errorf("q8 report: no line matching %q", want)
		}
	}
	if !strings.Contains(bf16.String(), "decoder weights bf16, prefill/vision products f32") || strings.Contains(bf16.String(), "kernel/q8") {
		t.Error("the bf16 report does not say bf16 with f32 products, or measures the int8 kernel")
	}
	wantMatmul := string(native.FastMatmul()) // auto's pick for the fast path on this CPU
	if wantMatmul != string(native.MatmulF32) {
		wantMatmul += " (split activations: vision)" // the default
	}
	if !strings.Contains(report, "decoder weights q8, prefill/vision products "+wantMatmul+",") {
		t.Errorf("the q8 report does not say its products are %s", wantMatmul)
	}
	if native.FastMatmul() != native.MatmulF32 { // --split reaches the backend
		var none bytes.Buffer
		if err := Run(append(args, "--quant", "q8", "--split", "none"), Defaults{}, &none); err != nil {
			t.Fatalf("bench --quant q8 --split none: %v", err)
		}
		if want := string(native.FastMatmul()) + " (split activations: none),"; !strings.Contains(none.String(), want) {
			t.Errorf("the --split none report does not say %q:\n%s", want, none.String())
		}
	}
	// 0.005 GB at three decimals: compare the ratio loosely.
	if r := bytesPerToken(report) / bytesPerToken(bf16.String()); r < 0.5 || r > 0.65 {
		t.Errorf("q8 reads %.2f of bf16's weight bytes per token, want 9/16", r)
	}
}

func TestBenchBatchSweep(t *testing.T) {
	var out bytes.Buffer
	err := Run([]string{"--weights", "../testdata/checkpoints/tiny-bf16", "--grid", "4x4", "--prompt", "12",
		"--tokens", "3", "--runs", "2", "--stream-mib", "8", "--threads", "2", "--batch", "1,2,4"}, Defaults{}, &out)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	report := out.String()
	t.Log("\n" + report)
	if !regexp.MustCompile(`fill +4 slots, .*prefill \(12 tokens\) each: vision [0-9.]+ ms, prefill [0-9.]+ ms`).MatchString(report) {
		t.Error("no fill line for 4 slots")
	}
	// One line per batch size: B, steps (tokens x runs), ms/step, tok/s, ratio, the same
	// three at the 10th-percentile step, ceiling, %, KV MB per row, GMAC/s, CPU tok/s.
	row := regexp.MustCompile(`(?m)^sweep +([0-9]+) +6 +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +[0-9]+% +[0-9.]+ +[0-9.]+ +[0-9.]+$`)
	var batches []string
	for _, m := range row.FindAllStringSubmatch(report, -1) {
		batches = append(batches, m[1])
		for _, f := range m[2:] {
			if v, err := strconv.ParseFloat(f, 64); err != nil || v <= 0 {
				t.Errorf("B=%s: figure %q is not a positive number", m[1], f)
			}
		}
		if m[1] == "1" && (m[4] != "1.00" || m[7] != "1.00") {
			t.Errorf("B=1 against itself: ratios %s and %s", m[4], m[7])
		}
	}
	if strings.Join(batches, ",") != "1,2,4" {
		t.Errorf("sweep lines for batches %v, want 1,2,4", batches)
	}
	if strings.Contains(report, "decode/p10") {
		t.Error("--batch also ran the stage runs")
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args  []string
		want  string
		usage bool // the command line's fault: a cli.UsageError
	}{
		{[]string{"--weights", ""}, "--weights is required", true},
		{[]string{"--weights", "x", "--grid", "24by44"}, `--grid "24by44"`, true},
		{[]string{"--weights", "x", "--grid", "0x4"}, "positive sides", true},
		{[]string{"--weights", "x", "--tokens", "0"}, "must be positive", true},
		{[]string{"--weights", "x", "--bogus"}, "flag provided but not defined", true},
		{[]string{"--weights", "x", "--batch", "4,2"}, "ascending batch sizes", true},
		{[]string{"--weights", "x", "--batch", "0"}, "ascending batch sizes", true},
		{[]string{"--weights", "x", "--batch", "1,x"}, "ascending batch sizes", true},
		{[]string{"--weights", "x", "--quant", "q4"}, `--quant "q4": want one of bf16, q8`, true},
		{[]string{"--weights", "x", "--split", "text"}, `--split "text": want one of vision, none, all`, true},
		{[]string{"--weights", "x", "--max-seq-len", "-1"}, "--max-seq-len -1", true},
		{[]string{"--weights", "x", "--prompt", "40", "--tokens", "4", "--max-seq-len", "44"}, "append 45 positions", true},
		{[]string{"--weights", "x", "--prompt", "40", "--tokens", "4", "--runs", "1", "--batch", "1,2", "--max-seq-len", "50"}, "append 51 positions", true},
		{[]string{"--weights", "/nonexistent/ckpt"}, "bench:", false},
		{[]string{"--weights", "../testdata/checkpoints/tiny-bf16", "--grid", "7x8"}, "multiples of the 2-patch merge", true},
		{[]string{"--weights", "../testdata/checkpoints/tiny-bf16", "--grid", "8x8", "--prompt", "10"}, "too short", true},
	} {
		err := Run(c.args, Defaults{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
		if cli.IsUsage(err) != c.usage {
			t.Errorf("%v: cli.IsUsage(%v) = %v, want %v", c.args, err, !c.usage, c.usage)
		}
	}
}
