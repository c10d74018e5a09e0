package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/internal/cli"
)

const preprocessUsage = "usage: worker preprocess --image FILE [--in-token-limit N] [--grid native|HxW] [--canon-aspect WxH] --out CANON.png"

// preprocessOutput is what `worker preprocess` prints, named as in /predict's answer.
type preprocessOutput struct {
	Width          int    `json:"width"`
	Height         int    `json:"height"`
	CanonicalSize  [2]int `json:"canonical_size"` // [w, h]
	GridHW         [2]int `json:"grid_hw"`
	NumImageTokens int    `json:"num_image_tokens"`
}

// preprocessOptions are `worker preprocess`'s flags.
type preprocessOptions struct {
	image, grid, aspect, out string
	limit                    int
}

// preprocessFlags defines `worker preprocess`'s flags on o. Those that stand for a
// variable of the engine's configuration take their defaults from cfg, as detect's do.
func preprocessFlags(o *preprocessOptions, cfg config.Worker) *flag.FlagSet {
	fs := flag.NewFlagSet("preprocess", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.image, "image", "", "image `FILE` (PNG, JPEG, GIF, WebP; required)")
	fs.IntVar(&o.limit, "in-token-limit", cfg.Engine.InTokenLimit, "most image patches before the image is shrunk (0 = the served limit, 1024)")
	fs.StringVar(&o.grid, "grid", cfg.Engine.CanonGrid, `vision grid: native, HxW in 14-px patches (even sides), or "" to derive it from --canon-aspect; unset: LA_CANON_GRID as the worker's engine reads it (empty: native on cpu)`)
	fs.StringVar(&o.aspect, "canon-aspect", cfg.Engine.CanonAspect, "`WxH` in pixels the grid is derived from when --grid is empty")
	fs.StringVar(&o.out, "out", "", "write the canonical image to `FILE` (PNG; required)")
	return fs
}

// preprocessFlagEnv maps preprocess's flags to the variables whose values are their defaults.
var preprocessFlagEnv = map[string]string{
	"in-token-limit": "LA_IN_TOKEN_LIMIT", "grid": "LA_CANON_GRID", "canon-aspect": "LA_CANON_ASPECT",
}

// runPreprocess implements `worker preprocess`: the image the model sees (decode, to_rgb
// and every resize of engine/imageproc, before normalisation) written as a PNG, and its
// sizes printed as JSON. No checkpoint: the served processor settings (patch 14, merge 2)
// with the token limit and grid the worker's engine would resize for: LA_IN_TOKEN_LIMIT,
// LA_CANON_GRID and LA_CANON_ASPECT on LA_ENGINE, read as the service reads them, and the
// flags, which replace them and mean what they mean for `worker detect`. It says on stderr
// what answered: the served processor settings, no checkpoint, and the limit and grid.
func runPreprocess(args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	var f preprocessOptions
	fs := preprocessFlags(&f, cfg)
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return flagError(fmt.Errorf("%w\n%s", err, preprocessUsage), preprocessHelp, stdout)
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case len(rest) > 0:
		return cli.UsageError{Err: fmt.Errorf("unexpected argument %q\n%s", rest[0], preprocessUsage)}
	case f.image == "" || f.out == "":
		return cli.UsageError{Err: fmt.Errorf("preprocess needs --image and --out\n%s", preprocessUsage)}
	case f.limit < 0:
		return cli.UsageError{Err: fmt.Errorf("--in-token-limit is %d, want 0 (the served limit) or more", f.limit)}
	case set["canon-aspect"] && set["grid"] && f.grid != "":
		return cli.UsageError{Err: fmt.Errorf("--canon-aspect derives the grid: give it without --grid (or with --grid \"\")")}
	case set["canon-aspect"]:
		f.grid = ""
	case !set["grid"]:
		f.grid = cfg.Engine.CanonGridSetting()
	}
	o := imageproc.DefaultOptions() // its limit is the served one, engine.ServedInTokenLimit
	if f.limit > 0 {
		o.InTokenLimit = f.limit
	}
	if o.CanonGrid, err = imageproc.ResolveCanonGrid(f.grid, f.aspect, o); err != nil {
		return cli.UsageError{Err: err}
	}
	grid := "native"
	if o.CanonGrid != [2]int{} {
		grid = fmt.Sprintf("%dx%d", o.CanonGrid[0], o.CanonGrid[1])
	}
	fmt.Fprintf(stderr, "worker preprocess: the served processor (patch %d, merge %d; no checkpoint read), in-token limit %d, grid %s\n",
		o.PatchSize, o.MergeKernel, o.InTokenLimit, grid)
	return preprocessFile(o, f.image, f.out, stdout)
}

// preprocessFile writes the canonical image of imagePath to outPath and prints its sizes.
func preprocessFile(o imageproc.Options, imagePath, outPath string, stdout io.Writer) error {
	data, err := os.ReadFile(imagePath)
	if err != nil {
		return fmt.Errorf("reading the image: %w", err)
	}
	c, err := o.Canonical(data)
	if err != nil {
		return err
	}
	var png bytes.Buffer
	if err := c.Image.EncodePNG(&png); err != nil {
		return err
	}
	if err := os.WriteFile(outPath, png.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing the canonical image: %w", err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(preprocessOutput{
		Width: c.Width, Height: c.Height,
		CanonicalSize:  [2]int{c.Image.W, c.Image.H},
		GridHW:         [2]int{c.GridH, c.GridW},
		NumImageTokens: c.NumImageTokens,
	})
}
