package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/httpcompat"
	"github.com/locateanything/detect/internal/cli"
	"github.com/locateanything/detect/internal/rawjson"
	"github.com/locateanything/detect/worker"
)

// detectOutput is the /predict-shaped answer of `worker detect`, with the generated ids
// and what answered after its keys.
type detectOutput struct {
	Answer     httpcompat.PredictResponse
	Tokens     []int32
	AnsweredBy answeredBy
}

// answeredBy names the model and the engine that gave an answer, so that a wrong
// checkpoint or engine shows in the answer itself.
type answeredBy struct {
	Model      string             `json:"model"`  // "LocateAnything-3B", "tiny-shapes"
	Engine     engine.BackendKind `json:"engine"` // LA_ENGINE: cpu, ttnn or sim
	Device     string             `json:"device"`
	WeightsDir string             `json:"weights_dir"`
}

// MarshalJSON writes the answer as /predict does (its own MarshalJSON places the hybrid
// addition), then "tokens" and "answered_by" after its keys.
func (o detectOutput) MarshalJSON() ([]byte, error) {
	answer, err := rawjson.Marshal(o.Answer)
	if err != nil {
		return nil, err
	}
	tokens, err := json.Marshal(o.Tokens)
	if err != nil {
		return nil, err
	}
	by, err := rawjson.Marshal(o.AnsweredBy)
	if err != nil {
		return nil, err
	}
	out := append(bytes.TrimSuffix(answer, []byte("}")), `,"tokens":`...)
	out = append(out, tokens...)
	out = append(out, `,"answered_by":`...)
	out = append(out, by...)
	return append(out, '}'), nil
}

// detectOptions are `worker detect`'s flags.
type detectOptions struct {
	weights, image, query, task, grid, overlay, mode string
	maxNew, inTokenLimit, threads                    int
}

// detectFlags defines `worker detect`'s flags on o. Those that stand for a variable of the
// engine's configuration take their defaults from cfg (the environment's values when
// detect runs, the variables' defaults for --help) and, when given, replace that value.
func detectFlags(o *detectOptions, cfg config.Worker) *flag.FlagSet {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.weights, "weights", cfg.Weights.Directory(), "checkpoint `DIR` (empty: what the worker would run, down to the bundled model)")
	fs.StringVar(&o.image, "image", "", "image `FILE` (PNG, JPEG, GIF, WebP; required)")
	fs.StringVar(&o.query, "query", "", "what to find; several categories joined with </c> (required but for --task text)")
	fs.StringVar(&o.task, "task", string(engine.TaskDetect), "one of "+engine.Tasks.List())
	fs.IntVar(&o.maxNew, "max-new-tokens", cfg.Engine.MaxNewTokens, "token budget")
	fs.StringVar(&o.mode, "generation-mode", string(cfg.Engine.GenerationMode),
		"decode in `MODE`: ar (one token per step) or hybrid (parallel box decoding: a whole box per step when the model is sure)")
	fs.IntVar(&o.inTokenLimit, "in-token-limit", cfg.Engine.InTokenLimit, "most image patches before the image is shrunk (0 = min(1024, the checkpoint's))")
	fs.StringVar(&o.grid, "grid", cfg.Engine.CanonGrid, "vision grid: native, or `HxW` in 14-px patches (even sides); empty: native on the cpu engine, else derived from LA_CANON_ASPECT")
	fs.StringVar(&o.overlay, "overlay", "", "write the overlay picture to `FILE`: JPEG when it ends in .jpg or .jpeg, PNG when .png")
	fs.IntVar(&o.threads, "threads", cfg.Engine.Threads, "CPU threads (0 = one per CPU)")
	return fs
}

// detectFlagEnv maps detect's flags to the variables whose values are their defaults.
var detectFlagEnv = map[string]string{
	"weights": "LA_WEIGHTS_DIR", "max-new-tokens": "LA_MAX_NEW_TOKENS", "generation-mode": "LA_GENERATION_MODE",
	"in-token-limit": "LA_IN_TOKEN_LIMIT", "grid": "LA_CANON_GRID", "threads": "LA_THREADS",
}

// apply puts the flags into cfg: detect runs one request at a time (LA_MAX_BATCH 1), and
// its --max-new-tokens raises the cap when it is above it.
func (o detectOptions) apply(cfg *config.Worker) {
	if o.weights != cfg.Weights.Directory() {
		cfg.Weights.Dir, cfg.Weights.ModelPath = o.weights, ""
	}
	e := &cfg.Engine
	e.MaxNewTokens, e.MaxNewTokensCap = o.maxNew, max(e.MaxNewTokensCap, o.maxNew)
	e.GenerationMode, e.InTokenLimit, e.CanonGrid, e.Threads = engine.GenerationMode(o.mode), o.inTokenLimit, o.grid, o.threads
	e.MaxBatch = 1
}

// overlayFormatOf picks the overlay's encoding from --overlay's file name, so that a
// picture.jpg is a JPEG; a name that says neither is refused before the model runs.
func overlayFormatOf(name string) (overlay.Format, error) {
	if name == "" { // no overlay asked for
		return overlay.PNG, nil
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".png":
		return overlay.PNG, nil
	case ".jpg", ".jpeg":
		return overlay.JPEG, nil
	}
	return "", fmt.Errorf("--overlay %q: name it .png, .jpg or .jpeg (the picture's format follows the name)", name)
}

// runDetect implements `worker detect`: one image, one query, straight through the engine,
// no queue and no server. The quickest way to try a checkpoint. It reads the service's
// configuration and opens the engine as the service does (worker.Open), so every LA_*
// variable applies, and its answer names the model and the engine that gave it.
func runDetect(args []string, stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	var o detectOptions
	rest, err := cli.Parse(detectFlags(&o, cfg), args)
	if err != nil {
		return flagError(err, detectHelp, stdout)
	}
	switch {
	case len(rest) > 0:
		return cli.UsageError{Err: fmt.Errorf("unexpected argument %q (worker detect --help)", rest[0])}
	case o.image == "" || o.query == "" && o.task != string(engine.TaskText):
		return cli.UsageError{Err: fmt.Errorf("detect needs --image and --query (worker detect --help)")}
	case !engine.GenerationMode(o.mode).Valid():
		return cli.UsageError{Err: fmt.Errorf("--generation-mode %q is not one of %s", o.mode, engine.GenerationModes.List())}
	case o.maxNew < 1 || o.threads < 0 || o.inTokenLimit < 0:
		return cli.UsageError{Err: fmt.Errorf("--max-new-tokens must be positive, --threads and --in-token-limit not negative")}
	}
	format, err := overlayFormatOf(o.overlay)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	o.apply(&cfg)
	data, err := os.ReadFile(o.image)
	if err != nil {
		return fmt.Errorf("reading the image: %w", err)
	}

	// Native backends bind to one OS thread: open, generate and close on this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := worker.Open(context.Background(), cfg, slog.New(slog.DiscardHandler), toolSetup())
	if err != nil {
		return err
	}
	defer p.Close()

	ctx := context.Background()
	prep, err := p.Prepare(ctx, engine.Request{
		Image: data, Query: o.query, Task: engine.Task(o.task), MaxNewTokens: o.maxNew, GenerationMode: engine.GenerationMode(o.mode),
	})
	if err != nil {
		return err
	}
	pred, err := p.Generate(ctx, prep)
	if err != nil {
		return err
	}
	in := p.Info()
	if o.overlay != "" {
		pic, err := overlay.NewEncoder().Encode(overlay.Options{Simulated: pred.Simulated}.Draw(prep.Image, pred.Detections, pred.Points), format)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.overlay, pic, 0o644); err != nil {
			return fmt.Errorf("writing the overlay: %w", err)
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // raw_text is full of <ref> and <box>: print them as the model wrote them
	return enc.Encode(detectOutput{Answer: httpcompat.NewPredictResponse(pred, nil), Tokens: pred.Tokens,
		AnsweredBy: answeredBy{Model: in.Model, Engine: in.Backend, Device: in.Device, WeightsDir: in.WeightsDir}})
}
