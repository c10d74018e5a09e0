// Package loadtest is `worker loadtest`: the service's throughput on the simulated chip
// (engine/sim). It runs the real asynchronous path in one process (an embedded NATS
// server with JetStream, the worker's Runners, local storage in a temporary directory) and
// pushes a set of 1920x1080 JPEG jobs, with overlays when asked, through it under several
// worker configurations in turn: the serial baseline (LA_PREFETCH=1, LA_MAX_BATCH=1: what
// the synchronous server achieves), then each asked LA_MAX_BATCH, for each asked LA_CHIPS.
// For each it reports jobs per second, the simulated chips' busy fraction, the submit-to-
// result latency, and the host CPU per job (the simulated chip itself spends none), as a
// table and finally as one JSON line (docs/throughput.md).
package loadtest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/internal/cli"
)

// Usage is the command line of `worker loadtest`.
const Usage = "usage: worker loadtest [--chips 1,4] [--batch 1,8] [--jobs 64] [--images DIR] [--overlay] [--overlay-format png|jpeg] [--query Q] [--console [--console-every 1s]]"

// Env is what the command runs with.
type Env struct {
	Stdout  io.Writer    // the table and the JSON line
	Log     *slog.Logger // the workers' warnings and errors; nil discards
	WorkDir string       // where relative paths (--images) start
}

// options are the flags.
type options struct {
	chips   []int
	batches []int
	jobs    int
	images  string
	overlay bool
	format  overlay.Format
	query   string
	stall   time.Duration
	// console: a browser polls the web console every consoleEvery during each scenario.
	console      bool
	consoleEvery time.Duration
}

// run is one invocation: the flags, the loaded configuration every scenario starts from,
// the frames, and a temporary directory.
type run struct {
	o      options
	base   config.Worker
	log    *slog.Logger
	tmp    string
	frames *frames
}

// Report is the final JSON line: the headline scenario's figures (the most chips, the
// last batch size asked) with the serial baseline of the same chip count beside them,
// then every scenario.
type Report struct {
	Outcome
	SerialBaselineJobsPerS        float64   `json:"serial_baseline_jobs_per_s"`
	SerialBaselineJobsPerSPerChip float64   `json:"serial_baseline_jobs_per_s_per_chip"`
	SpeedupPerChip                float64   `json:"speedup_per_chip_vs_serial"`
	CostModel                     costModel `json:"cost_model"`
	Images                        string    `json:"images"`
	Overlay                       bool      `json:"overlay"`
	OverlayFormat                 string    `json:"overlay_format,omitempty"`
	Query                         string    `json:"query"`
	Console                       bool      `json:"console,omitempty"` // a browser polled the web console (--console)
	Scenarios                     []Outcome `json:"scenarios"`
}

type costModel struct {
	VisionMS   float64 `json:"vision_ms"`
	PrefillMS  float64 `json:"prefill_ms"`
	DecodeMS   float64 `json:"decode_ms"`
	BatchAlpha float64 `json:"batch_alpha"`
	Speed      float64 `json:"speed"`
}

// Run parses args (the arguments after `loadtest`), runs every scenario with base (the
// worker's loaded configuration: LA_SIM_* and the other settings apply; the engine, chips,
// batch, prefetch, NATS, storage roots and servers are the load test's own) and writes the
// report. It returns a cli.UsageError for a bad command line, a bad image
// directory included (cmd/worker exits 2 on it).
func Run(ctx context.Context, args []string, base config.Worker, env Env) error {
	o, err := parseFlags(args, base)
	if err != nil {
		return err
	}
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	images := o.images
	if !filepath.IsAbs(images) {
		images = filepath.Join(env.WorkDir, images)
	}
	tmp, err := os.MkdirTemp("", "la-loadtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r := &run{o: o, base: base, log: env.Log, tmp: tmp}
	if r.frames, err = prepareFrames(images, filepath.Join(tmp, "frames")); err != nil {
		return cli.UsageError{Err: err}
	}

	out := env.Stdout
	c := base.Sim
	fmt.Fprintf(out, "simulated p150a: vision %s (24x44 grid), prefill %s (512 tokens), decode step %s x (1 + %.3g x (B-1)), speed %gx\n",
		c.Vision, c.Prefill, c.Decode, c.BatchAlpha, c.Speed)
	imagesNote := fmt.Sprintf("%d 1920x1080 JPEGs from %s", len(r.frames.paths), o.images)
	if r.frames.generated > 0 {
		imagesNote += fmt.Sprintf(" (%d generated: scaled to cover and centre-cropped from photographs of other sizes)", r.frames.generated)
	}
	overlayNote := "no overlay"
	if o.overlay {
		overlayNote = "overlay " + string(o.format)
	}
	fmt.Fprintf(out, "jobs: %d per scenario, %s, query %q, %s\n", o.jobs, imagesNote, o.query, overlayNote)
	if o.console {
		fmt.Fprintf(out, "console: served, and polled every %s as an open browser would\n", o.consoleEvery)
	}

	var outcomes []Outcome
	for _, s := range scenarios(o) {
		fmt.Fprintf(out, "running %-8s chips=%d batch=%d prefetch=%d ...", s.name, s.chips, s.batch, s.heldPerChip())
		res, err := r.runScenario(ctx, s)
		if err != nil {
			fmt.Fprintln(out, " failed")
			return fmt.Errorf("loadtest: %w", err)
		}
		if o.console {
			fmt.Fprintf(out, " %.2f jobs/s (%d console requests, %d failed, %.1f ms mean)\n", res.JobsPerS,
				res.ConsoleRequests, res.ConsoleFailed, res.ConsoleMeanMS)
		} else {
			fmt.Fprintf(out, " %.2f jobs/s\n", res.JobsPerS)
		}
		outcomes = append(outcomes, res)
	}
	writeTable(out, outcomes)
	rep := report(outcomes, c)
	rep.Images, rep.Overlay, rep.Query, rep.Console = imagesNote, o.overlay, o.query, o.console
	if o.overlay {
		rep.OverlayFormat = string(o.format)
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false) // the query's </c> as written
	return enc.Encode(rep)
}

// scenarios lists the runs: for each chip count, the serial baseline, then each batch
// size (batch 1 with the worker's default prefetch included when asked).
func scenarios(o options) []scenario {
	var list []scenario
	for _, chips := range o.chips {
		list = append(list, scenario{name: "serial", chips: chips, batch: 1, prefetch: 1})
		for _, b := range o.batches {
			list = append(list, scenario{name: "batch" + strconv.Itoa(b), chips: chips, batch: b})
		}
	}
	return list
}

// report picks the headline: the last scenario, with its chip count's serial baseline.
func report(outcomes []Outcome, c sim.Costs) Report {
	head := outcomes[len(outcomes)-1]
	rep := Report{Outcome: head, Scenarios: outcomes, CostModel: costModel{
		VisionMS: ms(c.Vision), PrefillMS: ms(c.Prefill), DecodeMS: ms(c.Decode), BatchAlpha: c.BatchAlpha, Speed: c.Speed,
	}}
	for _, o := range outcomes {
		if o.Scenario == "serial" && o.Chips == head.Chips {
			rep.SerialBaselineJobsPerS, rep.SerialBaselineJobsPerSPerChip = o.JobsPerS, o.JobsPerSPerChip
			if o.JobsPerS > 0 {
				rep.SpeedupPerChip = round(head.JobsPerS/o.JobsPerS, 2)
			}
		}
	}
	return rep
}

func writeTable(w io.Writer, outcomes []Outcome) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tchips\tbatch\tprefetch\tjobs\tfailed\tjobs/s\tper chip\t(overall)\tdevice busy\t(overall)\twake late\tmean batch\tp50 ms\tp95 ms\tCPU ms/job\ttokens/job\tdevice-bound jobs/s\t")
	for _, o := range outcomes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.1f%%\t%.1f%%\t%.1f%%\t%.2f\t%.0f\t%.0f\t%.1f\t%.1f\t%.2f\t\n",
			o.Scenario, o.Chips, o.Batch, o.Prefetch, o.Jobs, o.Failed, o.JobsPerS, o.JobsPerSPerChip, o.JobsPerSOverall,
			100*o.DeviceBusy, 100*o.DeviceBusyOverall, 100*o.SimWakeLate, o.MeanBatch, o.P50MS, o.P95MS, o.HostCPUMSPerJob,
			o.TokensPerJob, o.DeviceBoundJobsPerS)
	}
	tw.Flush()
}

// flagValues are the flags parsed as given, before parseFlags checks and converts them.
type flagValues struct {
	chips, batches, format string
}

// Flags is the flag set `worker loadtest` parses, for its --help: the defaults of --chips
// and --batch follow base (LA_CHIPS, LA_MAX_BATCH).
func Flags(base config.Worker) *flag.FlagSet {
	fs, _, _ := newFlagSet(base)
	return fs
}

// newFlagSet defines the flags on a new set; o and v receive the values when it parses.
func newFlagSet(base config.Worker) (*flag.FlagSet, *options, *flagValues) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o, v := &options{}, &flagValues{}
	fs.StringVar(&v.chips, "chips", strconv.Itoa(base.Engine.Chips), "simulated chips; a comma-separated list runs each")
	fs.StringVar(&v.batches, "batch", "1,"+strconv.Itoa(base.Engine.MaxBatch), "sequences per chip; a comma-separated list runs each")
	fs.IntVar(&o.jobs, "jobs", 64, "jobs per scenario")
	fs.StringVar(&o.images, "images", "testdata/images", "photographs in `DIR`; each that is not a 1920x1080 JPEG is made into one")
	fs.BoolVar(&o.overlay, "overlay", false, "ask every job for an overlay picture")
	fs.StringVar(&v.format, "overlay-format", string(overlay.PNG), "the overlays' encoding, png or jpeg")
	fs.StringVar(&o.query, "query", "person</c>car</c>bicycle", "the query of every job")
	fs.DurationVar(&o.stall, "stall", 2*time.Minute, "give up when no result arrives for this long")
	fs.BoolVar(&o.console, "console", false, "serve the web console and poll it as an open browser would (overview, batches and a gallery page every --console-every; each thumbnail once)")
	fs.DurationVar(&o.consoleEvery, "console-every", time.Second, "how often the browser of --console asks")
	return fs, o, v
}

func parseFlags(args []string, base config.Worker) (options, error) {
	fs, o, v := newFlagSet(base)
	if err := fs.Parse(args); err != nil {
		return *o, cli.UsageError{Err: fmt.Errorf("%w\n%s", err, Usage)}
	}
	if fs.NArg() > 0 {
		return *o, cli.UsageError{Err: fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), Usage)}
	}
	if o.format = overlay.Format(v.format); !o.format.Valid() {
		return *o, cli.UsageError{Err: fmt.Errorf("--overlay-format %q: want one of %v\n%s", v.format, overlay.Formats, Usage)}
	}
	var err error
	if o.chips, err = intList("--chips", v.chips, 1, 64); err != nil {
		return *o, err
	}
	if o.batches, err = intList("--batch", v.batches, 1, engine.MaxBatchLimit); err != nil {
		return *o, err
	}
	if o.jobs < 1 || o.stall <= 0 || o.consoleEvery <= 0 || strings.TrimSpace(o.query) == "" {
		return *o, cli.UsageError{Err: fmt.Errorf("--jobs %d and --stall %s must be positive and --query not empty\n%s", o.jobs, o.stall, Usage)}
	}
	return *o, nil
}

// intList parses "1,4" into distinct values in lo..hi, in the order given.
func intList(name, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || v < lo || v > hi {
			return nil, cli.UsageError{Err: fmt.Errorf("%s %q: want numbers %d..%d, comma-separated\n%s", name, s, lo, hi, Usage)}
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}
