// Package bench measures the CPU engine against the machine it runs on: it is
// `worker bench`. Run opens the CPU engine as the service does (pipeline.Open), times
// vision, prefill and decode on synthetic inputs of the served shapes on its backend, and
// prints each stage next to what the machine offers, measured in the same process:
// OpenBLAS sgemm GFLOP/s for vision and prefill, STREAM-style memory bandwidth for decode
// (whose ceiling is bandwidth / weight bytes read per token). The machine's figures come
// from bench/machine; the engine's own (its decode kernels alone) from engine/native.
package bench

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/locateanything/detect/bench/machine"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/native"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/internal/cli"
)

// Usage is the command line of `worker bench`, appended to flag errors.
const Usage = "usage: worker bench [--weights DIR] [--threads N] [--tokens 64] [--grid 24x44] [--prompt 303] [--runs 3] [--warmup=true] [--stream-mib 256] [--resident=true] [--quant bf16|q8] [--split vision|none|all] [--max-seq-len N] [--batch 1,2,4,8,16]"

// usagef formats an error of the command line, a cli.UsageError (cmd/worker exits 2 on
// it): a flag that does not parse, is missing or out of range, or a grid or prompt that
// does not fit the checkpoint.
func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

// options are the flags of `worker bench`.
type options struct {
	weights      string
	threads      int
	tokens       int
	gridH, gridW int
	prompt       int
	runs         int
	warmup       bool
	streamMiB    int
	resident     bool
	quant        engine.WeightsQuant // --quant: the decoder's weights, bf16 (the checkpoint's) or q8 (LA_WEIGHTS_QUANT)
	split        native.Split        // --split: which bf16 products carry split activations (backend option split_activations)
	batches      []int               // --batch: the batch sweep instead of the stage runs
	maxSeqLen    int                 // --max-seq-len: each sequence's KV cache (LA_MAX_SEQ_LEN); 0 = room for the runs alone
}

// positions is what the runs append to each sequence's KV cache: the prompt and the
// decode steps of the stage runs, or of every timed run of the sweep.
func (o options) positions() int {
	if len(o.batches) > 0 {
		return sweepSeqLen(o)
	}
	return o.prompt + o.tokens + 1
}

// seqLen is each sequence's KV cache in positions, as the backend opens it: the worker's
// (--max-seq-len), or when that is 0 just room for the runs.
func (o options) seqLen() int { return cmp.Or(o.maxSeqLen, o.positions()) }

// shapes are the sizes derived from the flags and the checkpoint's config.
type shapes struct {
	patches     int // vision patches, gridH x gridW
	imageTokens int // tokens after the merge
}

// Defaults are what the flags default to when not given: the command derives them from the
// worker's configuration (only commands read the environment), so that the bench runs the
// checkpoint and the settings the worker would.
type Defaults struct {
	// Weights chooses the checkpoint when --weights is empty (cmd/worker: the one the
	// worker would run); nil makes --weights required.
	Weights func() (string, error)
	// Settings are the worker's engine settings (LA_*), which the engine is opened with:
	// WeightsQuant, Threads and MaxSeqLen are the defaults of --quant ("" = bf16), --threads
	// and --max-seq-len (the KV cache per sequence; 0 = just room for the runs), and the
	// flags replace them.
	Settings engine.Settings
}

// Run implements `worker bench` with the arguments after the subcommand name, writing
// the report to stdout. Every error starts with "bench:"; errors of the command line are
// cli.UsageErrors, and those of the flags alone end with Usage.
func Run(args []string, d Defaults, stdout io.Writer) error {
	o, err := parseFlags(args, d)
	if err != nil {
		return err
	}
	if o.weights == "" && d.Weights != nil {
		if o.weights, err = d.Weights(); err != nil {
			return fmt.Errorf("bench: choosing the weights: %w", err)
		}
	}
	if o.weights == "" {
		return usagef("bench: --weights is required\n%s", Usage)
	}
	m, err := checkpoint.Open(o.weights)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer m.Close()
	sh, err := checkShapes(m.Config, o)
	if err != nil {
		return err
	}
	o.threads = engine.Settings{Threads: o.threads}.ThreadCount() // 0: the engine's own choice
	// Machine figures first, before the backend's buffers take memory.
	mf, err := measureMachine(m.Config, o, sh)
	if err != nil {
		return err
	}
	// The backend binds to one OS thread: open, run and close on this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := openEngine(d, o)
	if err != nil {
		return err
	}
	defer p.Close()
	b := p.Backend()
	u := setup{o: o, m: m, backend: b.Name(), matmul: matmulOf(b), sh: sh, mf: mf}
	if len(o.batches) > 0 {
		fill, sruns, err := runSweep(b, makeInputs(m.Config, o, sh), o)
		if err != nil {
			return err
		}
		rows, triad := summariseSweep(m, o, sruns)
		if err := reportSetup(stdout, u); err != nil {
			return err
		}
		return reportSweep(stdout, u, fill, rows, triad)
	}
	runs, err := timedRuns(b, makeInputs(m.Config, o, sh), o)
	if err != nil {
		return err
	}
	return report(stdout, u, summarise(m, o, sh, mf, runs))
}

// Flags is the flag set `worker bench` parses with the defaults d, for its --help.
func Flags(d Defaults) *flag.FlagSet {
	fs, _, _, _, _ := defineFlags(&options{}, d)
	return fs
}

// defineFlags defines the flags on a new set that parses into o; the strings it returns
// are the flags parseFlags checks and converts after parsing.
func defineFlags(o *options, d Defaults) (fs *flag.FlagSet, grid, batch, quant, split *string) {
	fs = flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.weights, "weights", "", "checkpoint `DIR` (empty: the one the worker would run)")
	fs.IntVar(&o.threads, "threads", d.Settings.Threads, "backend threads (0 = one per CPU)")
	fs.IntVar(&o.tokens, "tokens", 64, "decode steps per run")
	grid = fs.String("grid", "24x44", "vision grid HxW in 14-px patches")
	fs.IntVar(&o.prompt, "prompt", 303, "prefill prompt length, image tokens included")
	fs.IntVar(&o.runs, "runs", 3, "timed runs; each stage reports the median")
	fs.BoolVar(&o.warmup, "warmup", true, "one untimed run first (faults in the mapped weights)")
	fs.IntVar(&o.streamMiB, "stream-mib", 256, "size of each STREAM array in MiB")
	fs.BoolVar(&o.resident, "resident", true, "decode from a copy of the decoder's matrices (false: from the file mapping; backend option resident_weights)")
	quant = fs.String("quant", string(cmp.Or(d.Settings.WeightsQuant, engine.WeightsBF16)), "decoder weights: bf16 (the checkpoint's, the exact path) or q8 (the fast path: int8 blocks made at open, and prefill and vision on AMX where the CPU has it; LA_WEIGHTS_QUANT)")
	split = fs.String("split", string(native.Splits[0]), "which bf16 products (the fast path's, --quant q8) carry each activation as two bf16: vision (the image's), none or all (and prefill's; backend option split_activations)")
	fs.IntVar(&o.maxSeqLen, "max-seq-len", d.Settings.MaxSeqLen, "positions of each sequence's KV cache, as the worker opens the backend (0 = just room for the runs)")
	batch = fs.String("batch", "", "batch sizes to sweep, like 1,2,4,8,16: aggregate decode tokens/s of that many sequences decoded together (replaces the stage runs)")
	return fs, grid, batch, quant, split
}

// parseFlags reads the command line into options and checks what can be checked without
// the checkpoint: required flags, the grid's syntax, positive counts.
func parseFlags(args []string, d Defaults) (options, error) {
	var o options
	fs, grid, batch, quant, split := defineFlags(&o, d)
	if err := fs.Parse(args); err != nil {
		return o, usagef("bench: %w\n%s", err, Usage)
	}
	if fs.NArg() > 0 {
		return o, usagef("bench: unexpected argument %q\n%s", fs.Arg(0), Usage)
	}
	if _, err := fmt.Sscanf(*grid, "%dx%d", &o.gridH, &o.gridW); err != nil || o.gridH <= 0 || o.gridW <= 0 ||
		*grid != fmt.Sprintf("%dx%d", o.gridH, o.gridW) {
		return o, usagef("bench: --grid %q: want HxW with positive sides, like 24x44", *grid)
	}
	if o.tokens < 1 || o.prompt < 1 || o.runs < 1 || o.threads < 0 || o.streamMiB < 1 {
		return o, usagef("bench: --tokens, --prompt, --runs and --stream-mib must be positive, --threads not negative")
	}
	var err error
	if o.quant, err = engine.WeightsQuants.Parse(*quant); err != nil {
		return o, usagef("bench: --quant %q: want one of %s", *quant, engine.WeightsQuants.List())
	}
	if o.split, err = native.Splits.Parse(*split); err != nil {
		return o, usagef("bench: --split %q: want one of %s", *split, native.Splits.List())
	}
	if *batch != "" {
		if o.batches, err = parseBatches(*batch); err != nil {
			return o, err
		}
	}
	if o.maxSeqLen < 0 {
		return o, usagef("bench: --max-seq-len %d: want 0 (room for the runs) or more", o.maxSeqLen)
	}
	if o.maxSeqLen > 0 && o.positions() > o.maxSeqLen {
		return o, usagef("bench: the runs append %d positions to each sequence (--prompt, --tokens, --runs, --batch), more than "+
			"--max-seq-len %d (LA_MAX_SEQ_LEN): raise it or run less", o.positions(), o.maxSeqLen)
	}
	return o, nil
}

// checkShapes checks the grid and prompt against the checkpoint (the grid must merge
// evenly, the prompt must hold the image tokens and a little text) and returns the sizes
// every later phase uses.
func checkShapes(c *checkpoint.Config, o options) (shapes, error) {
	merge := c.Vision.MergeKernel
	if o.gridH%merge != 0 || o.gridW%merge != 0 {
		return shapes{}, usagef("bench: --grid %dx%d: sides must be multiples of the %d-patch merge", o.gridH, o.gridW, merge)
	}
	sh := shapes{patches: o.gridH * o.gridW, imageTokens: o.gridH * o.gridW / (merge * merge)}
	if o.prompt < sh.imageTokens+2 {
		return shapes{}, usagef("bench: --prompt %d is too short for the %d image tokens of a %dx%d grid", o.prompt, sh.imageTokens, o.gridH, o.gridW)
	}
	return sh, nil
}

// machineFigures are the ceilings each stage is compared with, measured before the
// backend opens.
type machineFigures struct {
	copyGBps, triadGBps float64 // STREAM copy and triad
	kernelGBps          float64 // the engine's decode kernel alone
	kernelQ8GBps        float64 // its int8 kernel alone (--quant q8)
	visionSGEMM         float64 // GFLOP/s at the vision MLP's shape
	prefillSGEMM        float64 // GFLOP/s at the decoder MLP's shape over the prompt
}

// measureMachine measures memory bandwidth, the engine's decode kernel alone (over 1 GB
// of 11008x2048 bf16 matrices, the MLP's shape) and sgemm at the dominant GEMM shape of
// vision and of prefill.
func measureMachine(c *checkpoint.Config, o options, sh shapes) (machineFigures, error) {
	var f machineFigures
	var err error
	if f.copyGBps, f.triadGBps, err = machine.MemoryBandwidth(o.streamMiB, o.threads, 5); err != nil {
		return f, fmt.Errorf("bench: %w", err)
	}
	if f.kernelGBps, err = native.MeasureMatvec(11008, 2048, 24, o.threads, 3); err != nil {
		return f, fmt.Errorf("bench: %w", err)
	}
	if o.quant == engine.WeightsQ8 { // the same 24 matrices' weights, a little over half the bytes
		if f.kernelQ8GBps, err = native.MeasureMatvecQ8(11008, 2048, 24, o.threads, 3); err != nil {
			return f, fmt.Errorf("bench: %w", err)
		}
	}
	if f.visionSGEMM, err = machine.SGEMM(sh.patches, c.Vision.Intermediate, c.Vision.Hidden, 3); err != nil {
		return f, fmt.Errorf("bench: %w", err)
	}
	if f.prefillSGEMM, err = machine.SGEMM(o.prompt, c.Text.Intermediate, c.Text.Hidden, 3); err != nil {
		return f, fmt.Errorf("bench: %w", err)
	}
	return f, nil
}

// openEngine opens the cpu engine as the service opens it, pipeline.Open with the
// worker's engine settings, but for what the flags replace: the threads, the decoder's
// weights, each sequence's KV cache (LA_MAX_SEQ_LEN, or room for the prompt and the
// decode steps), a slot for each sequence of the sweep's largest batch, and the resident
// copy of the weights or (--resident=false) the file mapping. The runs drive its backend
// directly, to time each stage on its own.
func openEngine(d Defaults, o options) (*pipeline.Pipeline, error) {
	s := d.Settings
	s.Backend, s.Threads, s.WeightsQuant, s.MaxSeqLen, s.MaxBatch = engine.BackendCPU, o.threads, o.quant, o.seqLen(), 1
	if len(o.batches) > 0 {
		s.MaxBatch = o.batches[len(o.batches)-1]
	}
	// The runs decode greedily, one token per step, o.tokens of them at a time.
	s.GenerationMode, s.MaxNewTokens, s.MaxNewTokensCap = engine.GenerationAR, o.tokens, o.tokens
	opts := pipeline.OpenOptions{Settings: s, WeightsDir: o.weights,
		BackendOptions: map[string]string{"split_activations": string(o.split)}}
	if !o.resident {
		opts.BackendOptions["resident_weights"] = "0"
	}
	p, err := pipeline.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return p, nil
}

// matmulOf is how the cpu backend multiplies in prefill and vision: its kernel set, and
// for bf16 products which of them carry split activations.
func matmulOf(b engine.Backend) string {
	m, ok := b.(interface {
		Matmul() native.Matmul
		Split() native.Split
	})
	if !ok {
		return ""
	}
	if m.Matmul() == native.MatmulF32 {
		return string(m.Matmul())
	}
	return fmt.Sprintf("%s (split activations: %s)", m.Matmul(), m.Split())
}
