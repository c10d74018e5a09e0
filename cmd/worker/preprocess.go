package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/locateanything/detect/engine/imageproc"
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

// runPreprocess implements `worker preprocess`: the image the model sees (decode, to_rgb
// and every resize of engine/imageproc, before normalisation) written as a PNG, and its
// sizes printed as JSON. No checkpoint: the served processor settings (patch 14, merge 2)
// with the token limit and grid of the flags, which mean what they mean for `worker
// detect` (and LA_IN_TOKEN_LIMIT, LA_CANON_GRID, LA_CANON_ASPECT).
func runPreprocess(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("preprocess", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	imagePath := fs.String("image", "", "image file (PNG, JPEG, GIF, WebP)")
	limit := fs.Int("in-token-limit", 0, "most image patches before the image is shrunk (0 = the served limit, 1024)")
	grid := fs.String("grid", "native", `vision grid: native, HxW in 14-px patches (even sides), or "" to derive it from --canon-aspect`)
	aspect := fs.String("canon-aspect", "", "WxH in pixels the grid is derived from when --grid is not given (default 1920x1080)")
	out := fs.String("out", "", "write the canonical image here (PNG)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, preprocessUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return err
		}
		return usageError{fmt.Errorf("%w\n%s", err, preprocessUsage)}
	}
	gridSet := false
	fs.Visit(func(f *flag.Flag) { gridSet = gridSet || f.Name == "grid" })
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), preprocessUsage)}
	case *imagePath == "" || *out == "":
		return usageError{fmt.Errorf("preprocess needs --image and --out\n%s", preprocessUsage)}
	case *aspect != "" && gridSet && *grid != "":
		return usageError{fmt.Errorf("--canon-aspect derives the grid: give it without --grid (or with --grid \"\")")}
	case *aspect != "":
		*grid = ""
	}
	o := imageproc.DefaultOptions()
	if *limit > 0 {
		o.InTokenLimit = *limit
	}
	var err error
	if o.CanonGrid, err = imageproc.ResolveCanonGrid(*grid, *aspect, o); err != nil {
		return usageError{err}
	}
	return preprocessFile(o, *imagePath, *out, stdout)
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
