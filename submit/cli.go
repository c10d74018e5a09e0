package submit

import (
	"context"
	"encoding/json"
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

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/version"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// Exit codes of the CLI.
const (
	ExitOK          = 0   // every job succeeded (or the command did what it was asked)
	ExitJobsFailed  = 1   // the run finished, and some jobs failed, were canceled or expired
	ExitUsage       = 2   // bad flags, bad input (a manifest line, a missing file), unknown job id
	ExitUnavailable = 3   // NATS, JetStream or storage could not be used
	ExitInterrupted = 130 // Ctrl-C or SIGTERM before every result arrived; rerun to resume
)

const usage = `usage:
  submit [run] [flags] INPUT...      submit images and collect their results
  submit status ID | --batch B       what the system knows about a job or a batch
  submit cancel ID | --batch B       cancel a job, or every queued job of a batch
  submit dlq list                    dead-lettered jobs
  submit dlq show ID                 one dead-letter record
  submit dlq replay ID | --all       publish dead-lettered jobs again

INPUT is an image file, a directory (searched recursively for .jpg .jpeg .png .gif .webp),
a glob pattern, a manifest (.jsonl or .csv) or an s3:// prefix.
NATS and S3 come from the worker's variables: LA_NATS_URL (default nats://127.0.0.1:4222),
LA_NATS_CREDS, LA_NATS_TLS_CA, LA_NATS_TLS_CERT, LA_NATS_TLS_KEY, LA_S3_ENDPOINT,
LA_S3_ACCESS_KEY, LA_S3_SECRET_KEY, LA_FILE_ROOTS, ...; see docs/submit.md.
`

// IO is where the CLI reads and writes.
type IO struct {
	Stdout, Stderr io.Writer
	// StderrTerminal says Stderr is a terminal: draw a progress bar there.
	StderrTerminal bool
	// LoadConfig reads the configuration (cmd/submit: from the environment) and finishes it.
	LoadConfig func() (Config, error)
}

// IsTerminal reports whether f is a character device (a terminal, not a file or pipe).
func IsTerminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// Main runs the CLI with args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, cio IO) int {
	cmd := "run"
	if len(args) > 0 {
		switch args[0] {
		case "run", "status", "cancel", "dlq":
			cmd, args = args[0], args[1:]
		case "help", "-h", "-help", "--help":
			fmt.Fprint(cio.Stdout, usage)
			return ExitOK
		case "version", "-version", "--version":
			fmt.Fprintln(cio.Stdout, version.Get().String("submit"))
			return ExitOK
		}
	}
	cfg, err := cio.LoadConfig()
	if err != nil {
		fmt.Fprintf(cio.Stderr, "submit: %v\n", err)
		return ExitUsage
	}
	switch cmd {
	case "run":
		return runCmd(ctx, args, cfg, cio)
	case "status":
		return statusCmd(ctx, args, cfg, cio)
	case "cancel":
		return cancelCmd(ctx, args, cfg, cio)
	default:
		return dlqCmd(ctx, args, cfg, cio)
	}
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// fail prints err and picks the exit code.
func fail(cio IO, err error) int {
	fmt.Fprintf(cio.Stderr, "submit: %v\n", err)
	var ue usageError
	var inputErr *InputError
	switch {
	case errors.As(err, &ue):
		fmt.Fprint(cio.Stderr, "\n"+usage)
		return ExitUsage
	case errors.Is(err, ErrInterrupted), errors.Is(err, context.Canceled):
		// Before InputError: Ctrl-C while the inputs are being listed arrives wrapped in one.
		return ExitInterrupted
	case errors.As(err, &inputErr), errors.Is(err, ErrUnknownJob):
		return ExitUsage
	default:
		return ExitUnavailable
	}
}

// connect opens NATS and JetStream; close releases them.
func connect(cfg Config) (js jetstream.JetStream, close func(), err error) {
	nc, err := cfg.connectNATS()
	if err != nil {
		return nil, nil, err
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
func openStore(cfg Config) (storage.Store, func(), error) {
	if cfg.Storage.Endpoint == "" && len(cfg.Storage.FileRoots) == 0 {
		return nil, func() {}, nil
	}
	st, err := storage.Open(cfg.Storage)
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Close() }, nil
}

func runCmd(ctx context.Context, args []string, cfg Config, cio IO) int {
	fs := flag.NewFlagSet("submit run", flag.ContinueOnError)
	fs.SetOutput(cio.Stderr)
	var (
		rc            RunConfig
		task          string
		overlayFormat string
	)
	fs.StringVar(&rc.Defaults.Query, "query", "", "query for every image without its own (detect: categories joined by </c>)")
	fs.StringVar(&task, "task", string(engine.TaskDetect), "task: "+taskList())
	fs.IntVar(&rc.Defaults.MaxNewTokens, "max-new-tokens", 0, "token budget per job (0 = the worker's default)")
	fs.BoolVar(&rc.Defaults.Overlay, "overlay", false, "ask for overlay pictures and download them into OUT/overlays")
	fs.StringVar(&overlayFormat, "overlay-format", "", "with --overlay: "+overlayFormatList()+" (default png; jpeg is about a fifth of the size)")
	fs.StringVar(&rc.Defaults.Batch, "batch", "", "batch name (default: the one OUT belongs to, else a new one)")
	fs.StringVar(&rc.Defaults.Output, "result-prefix", "", "URL prefix where workers store result JSON and overlays (default: the worker's LA default output)")
	fs.StringVar(&rc.Class, "class", "default", "job class: jobs go to la.jobs.<class>")
	fs.StringVar(&rc.OutDir, "out", "", "output directory: results.jsonl, resume state, overlays, COCO (required)")
	fs.IntVar(&rc.Concurrency, "concurrency", 4, "images read, hashed and uploaded at once")
	fs.IntVar(&rc.MaxInFlight, "max-in-flight", 64, "published jobs not yet acknowledged by JetStream, at most")
	fs.StringVar(&rc.UploadPrefix, "upload", cfg.UploadPrefix, "upload local images under this s3:// prefix (default $LA_SUBMIT_UPLOAD; empty = pass file:// URLs to a worker on this machine)")
	fs.BoolVar(&rc.COCO, "coco", false, "also write detections.coco.json")
	fs.BoolVar(&rc.Rehash, "rehash", false, "read and hash every local image again, even those an earlier run hashed and that look unchanged")
	fs.DurationVar(&rc.ProgressEvery, "progress-every", 10*time.Second, "period of the progress line when stderr is not a terminal")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	rc.Defaults.Task = engine.Task(task)
	if !rc.Defaults.Task.Valid() {
		return fail(cio, usagef("--task %q is not one of %s", task, taskList()))
	}
	if overlayFormat != "" {
		rc.Defaults.OverlayFormat = overlay.Format(overlayFormat)
		if !rc.Defaults.OverlayFormat.Valid() {
			return fail(cio, usagef("--overlay-format %q is not one of %s", overlayFormat, overlayFormatList()))
		}
		if !rc.Defaults.Overlay {
			return fail(cio, usagef("--overlay-format %s needs --overlay", overlayFormat))
		}
	}
	if rc.Defaults.MaxNewTokens < 0 {
		return fail(cio, usagef("--max-new-tokens %d is negative", rc.Defaults.MaxNewTokens))
	}
	rc.Inputs = fs.Args()
	if len(rc.Inputs) == 0 {
		return fail(cio, usagef("no inputs"))
	}
	if rc.OutDir == "" {
		return fail(cio, usagef("--out is required"))
	}
	if rc.Class != "" && !jobs.ValidToken(rc.Class) {
		return fail(cio, usagef("--class %q must be 1-128 characters of [A-Za-z0-9_-]", rc.Class))
	}
	if rc.Defaults.Batch != "" && !jobs.ValidToken(rc.Defaults.Batch) {
		return fail(cio, usagef("--batch %q must be 1-128 characters of [A-Za-z0-9_-]", rc.Defaults.Batch))
	}
	if rc.UploadPrefix != "" && !strings.HasPrefix(rc.UploadPrefix, "s3://") {
		return fail(cio, usagef("--upload %q must be an s3:// prefix", rc.UploadPrefix))
	}
	if rc.UploadPrefix != "" && !strings.HasSuffix(rc.UploadPrefix, "/") {
		rc.UploadPrefix += "/"
	}
	rc.MaxImageBytes = cfg.Storage.MaxImageBytes // the worker's limit: refuse what it would
	if rc.UploadPrefix == "" && cfg.Storage.Endpoint != "" && slices.ContainsFunc(rc.Inputs, func(in string) bool { return !isURL(in) }) {
		fmt.Fprintln(cio.Stderr, "submit: note: local images go to workers as file:// URLs (no --upload or LA_SUBMIT_UPLOAD); only a worker on this machine can read them")
	}
	store, closeStore, err := openStore(cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeStore()
	js, closeNATS, err := connect(cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeNATS()
	log := slog.New(slog.NewTextHandler(cio.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sum, err := Run(ctx, rc, Env{JS: js, Store: store, Progress: cio.Stderr, Terminal: cio.StderrTerminal, Log: log})
	if sum.Batch != "" {
		fmt.Fprintf(cio.Stdout, "batch %s, results in %s\n", sum.Batch, rc.OutDir)
		fmt.Fprintln(cio.Stdout, sum.String())
	}
	if err != nil {
		return fail(cio, err)
	}
	if sum.Failed > 0 {
		return ExitJobsFailed
	}
	return ExitOK
}

func overlayFormatList() string {
	names := make([]string, len(overlay.Formats))
	for i, f := range overlay.Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

func taskList() string {
	names := make([]string, len(engine.Tasks))
	for i, t := range engine.Tasks {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// idOrBatch parses "ID" or "--batch B" (and --reason for cancel).
func idOrBatch(name string, args []string, cio IO, withReason bool) (id, batch, reason string, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(cio.Stderr)
	fs.StringVar(&batch, "batch", "", "the batch")
	if withReason {
		fs.StringVar(&reason, "reason", "", "why (kept with the cancel request)")
	}
	if err := fs.Parse(args); err != nil {
		return "", "", "", usagef("%s: %v", name, err)
	}
	switch {
	case batch != "" && fs.NArg() == 0:
		return "", batch, reason, nil
	case batch == "" && fs.NArg() == 1:
		return fs.Arg(0), "", reason, nil
	}
	return "", "", "", usagef("%s: give one job ID or --batch B", name)
}

// adminFor connects to NATS and opens the storage (when configured) for the admin
// commands; the function returned closes both.
func adminFor(ctx context.Context, cfg Config) (*Admin, func(), error) {
	js, closeNATS, err := connect(cfg)
	if err != nil {
		return nil, nil, err
	}
	store, closeStore, err := openStore(cfg)
	if err != nil {
		closeNATS()
		return nil, nil, err
	}
	closeAll := func() { closeStore(); closeNATS() }
	a, err := NewAdmin(ctx, js, store)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return a, closeAll, nil
}

func statusCmd(ctx context.Context, args []string, cfg Config, cio IO) int {
	id, batch, _, err := idOrBatch("status", args, cio, false)
	if err != nil {
		return fail(cio, err)
	}
	a, closeNATS, err := adminFor(ctx, cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeNATS()
	if batch != "" {
		b, err := a.BatchStatus(ctx, batch)
		if err != nil {
			return fail(cio, err)
		}
		b.Print(cio.Stdout)
		return ExitOK
	}
	s, err := a.Status(ctx, id)
	if err != nil {
		return fail(cio, err)
	}
	s.Print(cio.Stdout)
	return ExitOK
}

func cancelCmd(ctx context.Context, args []string, cfg Config, cio IO) int {
	id, batch, reason, err := idOrBatch("cancel", args, cio, true)
	if err != nil {
		return fail(cio, err)
	}
	a, closeNATS, err := adminFor(ctx, cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeNATS()
	if batch != "" {
		n, err := a.CancelBatch(ctx, batch, reason)
		if err != nil {
			return fail(cio, err)
		}
		fmt.Fprintf(cio.Stdout, "cancel requested for %d queued or running jobs of batch %s\n", n, batch)
		return ExitOK
	}
	if err := a.Cancel(ctx, id, reason); err != nil {
		return fail(cio, err)
	}
	fmt.Fprintf(cio.Stdout, "cancel requested for job %s\n", id)
	return ExitOK
}

func dlqCmd(ctx context.Context, args []string, cfg Config, cio IO) int {
	if len(args) == 0 {
		return fail(cio, usagef("dlq: want list, show ID or replay ID|--all"))
	}
	sub, rest := args[0], args[1:]
	var id string
	switch {
	case sub == "list" && len(rest) == 0:
	case sub == "show" && len(rest) == 1, sub == "replay" && len(rest) == 1:
		id = rest[0]
	default:
		return fail(cio, usagef("dlq: want list, show ID or replay ID|--all"))
	}
	a, closeNATS, err := adminFor(ctx, cfg)
	if err != nil {
		return fail(cio, err)
	}
	defer closeNATS()
	switch {
	case sub == "list":
		entries, err := a.DLQList(ctx)
		if err != nil {
			return fail(cio, err)
		}
		PrintDLQ(cio.Stdout, entries)
	case sub == "show":
		e, err := a.DLQShow(ctx, id)
		if err != nil {
			return fail(cio, err)
		}
		b, _ := json.MarshalIndent(e.Record, "", "  ")
		fmt.Fprintf(cio.Stdout, "%s\n", b)
	case id == "--all" || id == "-all":
		ids, err := a.DLQReplayAll(ctx)
		for _, id := range ids {
			fmt.Fprintf(cio.Stdout, "replayed %s\n", id)
		}
		if err != nil {
			return fail(cio, err)
		}
		fmt.Fprintf(cio.Stdout, "%d jobs replayed\n", len(ids))
	default:
		if err := a.DLQReplay(ctx, id); err != nil {
			return fail(cio, err)
		}
		fmt.Fprintf(cio.Stdout, "replayed %s\n", id)
	}
	return ExitOK
}
