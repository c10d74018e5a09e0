package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/internal/version"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/submit"
)

// Exit codes of the CLI.
const (
	ExitOK          = 0   // every job succeeded (or the command did what it was asked)
	ExitJobsFailed  = 1   // the run finished, and some jobs failed, were canceled or expired
	ExitUsage       = 2   // bad flags, bad input (a manifest line, a missing file), unknown job id
	ExitUnavailable = 3   // NATS, JetStream or storage could not be used
	ExitInterrupted = 130 // Ctrl-C or SIGTERM before every result arrived; rerun to resume
)

// IO is where the CLI reads and writes.
type IO struct {
	Stdout, Stderr io.Writer
	// StderrTerminal says Stderr is a terminal: draw a progress bar there.
	StderrTerminal bool
	// LoadConfig reads the configuration (from the environment) and finishes it.
	LoadConfig func() (config.Submit, error)
	// Environ is the process environment, for --help to show which variables are set;
	// nil shows none.
	Environ []string
}

// IsTerminal reports whether f is a character device (a terminal, not a file or pipe).
func IsTerminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// command is one of the CLI's commands.
type command struct {
	summary string
	help    func(IO) cli.Help // built from the flag set the command parses
	run     func(ctx context.Context, args []string, cio IO) int
}

// commands are the CLI's commands by name; the dlq subcommands are "dlq list" and so on.
func commands() map[string]command {
	return map[string]command{
		"run":        {"submit images and collect their results (the default command)", runHelp, runCmd},
		"status":     {"a job (by id, id prefix or source image), a batch, or the queue at a glance", statusHelp, statusCmd},
		"batches":    {"every batch with jobs queued or results kept, the latest first", batchesHelp, batchesCmd},
		"cancel":     {"cancel a job, or every queued job of a batch", cancelHelp, cancelCmd},
		"dlq":        {"dead-lettered jobs: list, show, replay", dlqHelp, dlqCmd},
		"dlq list":   {"dead-lettered jobs, of one batch with --batch", dlqListHelp, dlqListCmd},
		"dlq show":   {"one dead-letter record (JSON)", dlqShowHelp, dlqShowCmd},
		"dlq replay": {"publish dead-lettered jobs again, after fixing the cause", dlqReplayHelp, dlqReplayCmd},
		"retry":      {"run a batch's failed (or canceled, expired) jobs again", retryHelp, retryCmd},
		"clean":      {"remove the files workers stored for a batch's results, or for old ones", cleanHelp, cleanCmd},
	}
}

// Main runs the CLI with args (without the program name) and returns the exit code.
// --help (anywhere before a "--") and --version print and exit 0 before anything is read
// or contacted.
func Main(ctx context.Context, args []string, cio IO) int {
	cmds := commands()
	name, rest := "run", args
	if len(args) > 0 {
		switch first := args[0]; {
		case cli.IsVersion(first) || first == "version":
			fmt.Fprintln(cio.Stdout, version.Get().String("submit"))
			return ExitOK
		case first == "help": // submit help [COMMAND]
			name, rest = strings.Join(args[1:], " "), []string{"--help"}
			if name == "" {
				name = "run"
			}
		case first == "dlq":
			name, rest = "dlq", args[1:]
			if len(args) > 1 && cmds["dlq "+args[1]].run != nil {
				name, rest = "dlq "+args[1], args[2:]
			}
		case cmds[first].run != nil:
			name, rest = first, args[1:]
		}
	}
	c, ok := cmds[name]
	switch {
	case !ok && strings.HasPrefix(name, "dlq"):
		return fail(cio, usagef(dlqUsage))
	case !ok:
		return fail(cio, usagef("unknown command %q", name))
	case cli.AsksHelp(rest):
		if err := c.help(cio).Write(cio.Stdout); err != nil {
			return ExitUnavailable
		}
		return ExitOK
	}
	return c.run(ctx, rest, cio)
}

// overview lists the commands, one line each: the dlq group's subcommands, not the group.
func overview() string {
	summaries := map[string]string{}
	for n, c := range commands() {
		if n != "dlq" {
			summaries[n] = c.summary
		}
	}
	return cli.Overview("submit", summaries)
}

// usagef formats a mistake in the command line, a cli.UsageError: exit 2 after the overview.
func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

// fail prints err and picks the exit code.
func fail(cio IO, err error) int {
	fmt.Fprintf(cio.Stderr, "submit: %v\n", err)
	var argErr *submit.ArgumentError
	switch {
	case cli.IsUsage(err):
		fmt.Fprint(cio.Stderr, "\n"+overview())
		return ExitUsage
	case errors.Is(err, submit.ErrInterrupted), errors.Is(err, context.Canceled):
		// Before ArgumentError: Ctrl-C while the inputs are being listed arrives wrapped in one.
		return ExitInterrupted
	case errors.As(err, &argErr), errors.Is(err, submit.ErrUnknownJob):
		return ExitUsage
	default:
		return ExitUnavailable
	}
}

// newFlags is a command's flag set: errors and help are printed by the CLI, not by flag.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses a command's arguments, flags anywhere among them.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return nil, usagef("%s: %v", fs.Name(), err)
	}
	return rest, nil
}

// loadConfig reads the configuration; an error is the user's to fix (exit 2).
func configure(cio IO) (config.Submit, int, bool) {
	cfg, err := cio.LoadConfig()
	if err != nil {
		fmt.Fprintf(cio.Stderr, "submit: %v\n", err)
		return cfg, ExitUsage, false
	}
	return cfg, ExitOK, true
}

// connect opens NATS and JetStream; close releases them.
func connect(cfg config.Submit) (js jetstream.JetStream, close func(), err error) {
	nc, err := cfg.NATS.Connect("", "la-submit", nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is a worker or NATS server running? set LA_NATS_URL)", err)
	}
	js, err = jetstream.New(nc, jetstream.WithDefaultTimeout(cfg.NATS.Timeout))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream: %w", err)
	}
	return js, nc.Close, nil
}

// openStore opens the configured storage, or returns nil when neither S3 nor file roots
// are configured.
func openStore(cfg config.Submit) (storage.Store, func(), error) {
	if cfg.Storage.Endpoint == "" && len(cfg.Storage.FileRoots) == 0 {
		return nil, func() {}, nil
	}
	st, err := storage.Open(cfg.Storage)
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Close() }, nil
}

// runOptions are `submit run`'s flags.
type runOptions struct {
	rc            submit.RunConfig
	task          string
	mode          string
	overlayFormat string
	dryRun, json  bool
}

// runFlags defines `submit run`'s flags on o.
func runFlags(o *runOptions) *flag.FlagSet {
	fs := newFlags("run")
	rc := &o.rc
	fs.StringVar(&rc.OutDir, "out", "", "output `DIR`: results.jsonl, a JSON file and overlay per image mirroring the inputs, resume state, COCO (required)")
	fs.StringVar(&rc.Defaults.Query, "query", "", "query `Q` of every image without its own (detect: categories joined by </c>)")
	fs.StringVar(&o.task, "task", string(engine.TaskDetect), "task `T`: "+engine.Tasks.List())
	fs.IntVar(&rc.Defaults.MaxNewTokens, "max-new-tokens", 0, "token budget `N` per job (0 = the worker's default)")
	fs.StringVar(&o.mode, "generation-mode", "", "decode every job in mode `M`: "+engine.GenerationModes.List()+
		" (ar: one token per step; hybrid: a whole box per step when the model is sure; empty: the worker's LA_GENERATION_MODE)")
	fs.BoolVar(&rc.Defaults.Overlay, "overlay", false, "ask for overlay pictures and download them into OUT/overlays/, below each image's path")
	fs.StringVar(&o.overlayFormat, "overlay-format", "", "with --overlay, the overlays' format `F`: "+overlay.Formats.List()+" (empty: png; jpeg is about a fifth of the size)")
	fs.BoolVar(&rc.COCO, "coco", false, "also write "+submit.COCOFile+" (a COCO dataset) and "+submit.COCOResultsFile+" (its results list)")
	fs.StringVar(&rc.Defaults.Batch, "batch", "", "batch name `B` (default: the one OUT belongs to, else a new one)")
	fs.StringVar(&rc.Class, "class", jobs.DefaultClass, "job class `C`: jobs go to la.jobs.<C>")
	fs.StringVar(&rc.UploadPrefix, "upload", "", "upload local images under this s3:// `PREFIX` (empty: pass file:// URLs to a worker on this machine)")
	fs.StringVar(&rc.Defaults.Output, "result-prefix", "", "`URL` prefix where workers store result JSON and overlays (empty: the worker's default)")
	fs.IntVar(&rc.Concurrency, "concurrency", 4, "`N` images read, hashed and uploaded at once")
	fs.IntVar(&rc.MaxInFlight, "max-in-flight", 64, "at most `N` published jobs not yet acknowledged by JetStream")
	fs.DurationVar(&rc.ProgressEvery, "progress-every", 10*time.Second, "period `D` of the progress line when stderr is not a terminal")
	fs.BoolVar(&rc.Rehash, "rehash", false, "read and hash every local image again, even those an earlier run hashed and that look unchanged")
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be submitted and how many jobs are already done; publish, upload and write nothing")
	fs.BoolVar(&o.json, "json", false, "with --dry-run: print the plan as JSON")
	return fs
}

// checkRun checks the parsed flags and fills in what depends on the configuration.
func checkRun(o *runOptions, fs *flag.FlagSet, inputs []string, cfg config.Submit) error {
	rc := &o.rc
	rc.Inputs = inputs
	rc.Defaults.Task = engine.Task(o.task)
	uploadSet := false
	fs.Visit(func(f *flag.Flag) { uploadSet = uploadSet || f.Name == "upload" })
	if !uploadSet {
		rc.UploadPrefix = cfg.UploadPrefix // LA_SUBMIT_UPLOAD
	}
	switch {
	case !rc.Defaults.Task.Valid():
		return usagef("--task %q is not one of %s", o.task, engine.Tasks.List())
	case o.overlayFormat != "" && !overlay.Format(o.overlayFormat).Valid():
		return usagef("--overlay-format %q is not one of %s", o.overlayFormat, overlay.Formats.List())
	case o.overlayFormat != "" && !rc.Defaults.Overlay:
		return usagef("--overlay-format %s needs --overlay", o.overlayFormat)
	case o.mode != "" && !engine.GenerationMode(o.mode).Valid():
		return usagef("--generation-mode %q is not one of %s", o.mode, engine.GenerationModes.List())
	case rc.Defaults.MaxNewTokens < 0:
		return usagef("--max-new-tokens %d is negative", rc.Defaults.MaxNewTokens)
	case rc.Class != "" && !jobs.ValidToken(rc.Class):
		return usagef("--class %q must be 1-128 characters of [A-Za-z0-9_-]", rc.Class)
	case rc.Defaults.Batch != "" && !jobs.ValidToken(rc.Defaults.Batch):
		return usagef("--batch %q must be 1-128 characters of [A-Za-z0-9_-]", rc.Defaults.Batch)
	case rc.UploadPrefix != "" && !strings.HasPrefix(rc.UploadPrefix, "s3://"):
		return usagef("--upload %q must be an s3:// prefix", rc.UploadPrefix)
	case o.json && !o.dryRun:
		return usagef("--json goes with --dry-run (a run's rows are JSON already: results.jsonl)")
	}
	rc.Defaults.OverlayFormat = overlay.Format(o.overlayFormat)
	rc.Defaults.GenerationMode = engine.GenerationMode(o.mode)
	if rc.UploadPrefix != "" && !strings.HasSuffix(rc.UploadPrefix, "/") {
		rc.UploadPrefix += "/"
	}
	rc.MaxImageBytes = cfg.Storage.MaxImageBytes // the worker's limit: refuse what it would
	return nil
}

func runCmd(ctx context.Context, args []string, cio IO) int {
	var o runOptions
	fs := runFlags(&o)
	inputs, err := parseFlags(fs, args)
	if err != nil {
		return fail(cio, err)
	}
	if len(inputs) == 0 {
		return fail(cio, usagef("no inputs"))
	}
	if o.rc.OutDir == "" {
		return fail(cio, usagef("--out is required"))
	}
	cfg, code, ok := configure(cio)
	if !ok {
		return code
	}
	if err := checkRun(&o, fs, inputs, cfg); err != nil {
		return fail(cio, err)
	}
	rc := o.rc
	if rc.UploadPrefix == "" && cfg.Storage.Endpoint != "" && slices.ContainsFunc(rc.Inputs, func(in string) bool { return !submit.IsURL(in) }) {
		fmt.Fprintln(cio.Stderr, "submit: note: local images go to workers as file:// URLs (no --upload or LA_SUBMIT_UPLOAD); only a worker on this machine can read them")
	}
	store, closeStore, err := openStore(cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeStore()
	if o.dryRun {
		return dryRunCmd(ctx, rc, cfg, store, o.json, cio)
	}
	// List the inputs first: a missing file or an empty glob is the user's to fix, and
	// must say so even when no NATS server is up yet.
	if rc.Listed, err = submit.Expand(ctx, rc.Inputs, store); err != nil {
		return fail(cio, &submit.ArgumentError{Err: err})
	}
	if err := submit.CheckQueries(rc.Listed, rc.Defaults); err != nil {
		return fail(cio, err)
	}
	js, closeNATS, err := connect(cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeNATS()
	log := slog.New(slog.NewTextHandler(cio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sum, err := submit.Run(ctx, rc, submit.Env{JS: js, Store: store, Progress: cio.Stderr, Terminal: cio.StderrTerminal, Log: log})
	if sum.Batch != "" {
		fmt.Fprintf(cio.Stdout, "batch %s, results in %s\n", sum.Batch, rc.OutDir)
		fmt.Fprintln(cio.Stdout, sum.String())
		fmt.Fprint(cio.Stdout, sum.Problems())
	}
	if err != nil {
		return fail(cio, err)
	}
	if sum.Failed > 0 {
		return ExitJobsFailed
	}
	return ExitOK
}

func runHelp(cio IO) cli.Help {
	var o runOptions
	return withEnv(cli.Help{
		Usage: []string{"submit [run] [flags] INPUT...", "submit run --dry-run [--json] [flags] INPUT...", "submit COMMAND [flags] [arguments]"},
		Summary: "Publishes one job per image of INPUT and collects every result into --out; safe to\n" +
			"interrupt and to rerun (nothing finished or queued is published again). INPUT is an image\n" +
			"file, a directory (searched recursively for .jpg .jpeg .png .gif .webp), a glob, a manifest\n" +
			"(.jsonl or .csv) or an s3:// or file:// prefix. The output mirrors the inputs:\n" +
			"OUT/results/cam04/000123.json and OUT/overlays/cam04/000123.png for frames/cam04/000123.jpg\n" +
			"given as frames/. Exit 0: every job succeeded; 1: some failed; 2: bad flags or input;\n" +
			"3: NATS or storage unusable; 130: interrupted (rerun to resume).\n\n" + overview(),
		Flags:   runFlags(&o),
		FlagEnv: map[string]string{"upload": "LA_SUBMIT_UPLOAD"},
		Footer:  "docs/submit.md has the whole story: inputs, the output directory, resuming, exit codes.",
	}, cio)
}

// withEnv adds to a command's help the variables submit reads (package config), with the
// defaults the program applies beyond their tags (config.Submit.Finish).
func withEnv(h cli.Help, cio IO) cli.Help {
	h.Env = config.Settings(config.Submit{}, nil)
	h.Environ = cio.Environ
	h.EnvDefaults = map[string]string{
		"LA_NATS_URL":   config.SubmitNATSURL,
		"LA_FILE_ROOTS": "/ when every LA_NATS_URL server is on loopback and no LA_S3_ENDPOINT is set",
	}
	return h
}
