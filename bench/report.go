package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/native"
)

// setup is what the report says about the run's conditions: flags, checkpoint, backend,
// derived shapes and the machine's figures.
type setup struct {
	o       options
	m       *checkpoint.Model
	backend string
	matmul  string // prefill and vision products: f32, or amx or avx512bf16 with the split
	sh      shapes
	mf      machineFigures
}

// report prints one line per figure, each starting with its name padded to 12 columns
// (docs/cpu-backend.md quotes them), and returns the first write error.
func report(stdout io.Writer, u setup, s summary) error {
	if err := reportSetup(stdout, u); err != nil {
		return err
	}
	o, mf := u.o, u.mf
	w := &reportWriter{w: stdout}
	w.printf("vision      grid %dx%d (%d patches, %d image tokens): %s, %.1f GFLOP/s = %.2f x sgemm\n",
		o.gridH, o.gridW, u.sh.patches, u.sh.imageTokens, ms(s.vision), s.visionGF, s.visionGF/mf.visionSGEMM)
	w.printf("prefill     %d tokens: %s, %.1f GFLOP/s = %.2f x sgemm\n", o.prompt, ms(s.prefill), s.prefillGF, s.prefillGF/mf.prefillSGEMM)
	w.printf("decode      %d tokens: %s, %.2f tokens/s, %.3f GB weights/token = %.1f GB/s; ceiling triad/bytes %.2f tokens/s; %.0f%% of ceiling\n",
		o.tokens, ms(s.decode), s.tokPerSec, s.bytesPerToken/1e9, s.decodeGBps, s.ceiling, 100*s.tokPerSec/s.ceiling)
	w.printf("decode/run  triad before each run %.1f GB/s (median); decode per run at %.0f%% of that run's ceiling (median; min %.0f%%, max %.0f%%)\n",
		s.runTriad, 100*s.ratioMedian, 100*s.ratioMin, 100*s.ratioMax)
	// On a machine shared with other work the decode threads are off-CPU much of the
	// time; CPU time per token over the thread count is what a token costs when the
	// threads have their cores.
	if s.cpuPerToken > 0 {
		cpuTokPerSec := float64(o.threads) / s.cpuPerToken.Seconds()
		w.printf("decode/cpu  %s CPU per token on %d threads = %.2f tokens/s with the cores to itself = %.1f GB/s; %.0f%% of the best-triad ceiling\n",
			ms(s.cpuPerToken), o.threads, cpuTokPerSec, s.bytesPerToken*cpuTokPerSec/1e9, 100*s.bytesPerToken*cpuTokPerSec/(s.bestTriad*1e9))
	}
	w.printf("decode/p10  10th-percentile step %s = %.2f tokens/s = %.1f GB/s; best triad %.1f GB/s; %.0f%% of that ceiling\n",
		ms(s.fastStep), 1/s.fastStep.Seconds(), s.bytesPerToken/s.fastStep.Seconds()/1e9, s.bestTriad,
		100*s.bytesPerToken/s.fastStep.Seconds()/(s.bestTriad*1e9))
	w.printf("total       vision + prefill + decode %s (medians summed)\n", ms(s.vision+s.prefill+s.decode))
	if s.mem.rss > 0 {
		w.printf("memory      resident %.2f GB (anonymous %.2f GB, file pages %.2f GB) after the runs; peak %.2f GB\n",
			s.mem.rss/1e9, s.mem.anon/1e9, s.mem.file/1e9, s.mem.peak/1e9)
	}
	return w.err
}

// reportSetup prints the lines every report starts with: the checkpoint, the backend, the
// machine's figures and the decode kernel alone.
func reportSetup(stdout io.Writer, u setup) error {
	o, c, mf := u.o, u.m.Config, u.mf
	w := &reportWriter{w: stdout}
	w.printf("checkpoint  %s: %s weights, %d tensors, %.2f GB mapped\n", o.weights, dtypeSummary(u.m), len(u.m.Tensors), float64(u.m.Bytes())/1e9)
	w.printf("backend     %s, decode kernels %s, %d threads, %d runs (median), resident weights %v, decoder weights %s, prefill/vision products %s, KV cache %d positions per sequence\n",
		u.backend, native.KernelISA(), o.threads, o.runs, o.resident || o.quant == engine.WeightsQ8, o.quant, u.matmul, o.seqLen())
	w.printf("machine     memory copy %.1f GB/s, triad %.1f GB/s (%d MiB arrays); OpenBLAS sgemm %.1f GFLOP/s at %dx%dx%d, %.1f GFLOP/s at %dx%dx%d\n",
		mf.copyGBps, mf.triadGBps, o.streamMiB, mf.visionSGEMM, u.sh.patches, c.Vision.Intermediate, c.Vision.Hidden,
		mf.prefillSGEMM, o.prompt, c.Text.Intermediate, c.Text.Hidden)
	w.printf("kernel      bf16 matrix-vector alone, 24 x 11008x2048 (1 GB): %.1f GB/s = %.0f%% of triad\n",
		mf.kernelGBps, 100*mf.kernelGBps/mf.triadGBps)
	if mf.kernelQ8GBps > 0 {
		w.printf("kernel/q8   int8 matrix-vector alone, the same 24 matrices (0.61 GB): %.1f GB/s = %.0f%% of triad, %.2fx the bf16 kernel's weights per second\n",
			mf.kernelQ8GBps, 100*mf.kernelQ8GBps/mf.triadGBps, mf.kernelQ8GBps/1.125/(mf.kernelGBps/2))
	}
	return w.err
}

// ms writes a duration in milliseconds with one decimal, the unit of every stage line.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1e3) }

// dtypeSummary names the checkpoint's tensor dtypes in order of first appearance, joined
// with "+" (e.g. "bf16" or "bf16+f32").
func dtypeSummary(m *checkpoint.Model) string {
	var names []string
	for _, t := range m.Tensors {
		if s := t.DType.String(); !slices.Contains(names, s) {
			names = append(names, s)
		}
	}
	return strings.Join(names, "+")
}

// reportWriter keeps the first write error so the report reads as plain prints.
type reportWriter struct {
	w   io.Writer
	err error
}

// printf writes one formatted line unless an earlier write failed.
func (r *reportWriter) printf(format string, args ...any) {
	if r.err == nil {
		_, r.err = fmt.Fprintf(r.w, format, args...)
	}
}
