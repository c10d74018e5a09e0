package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/httpcompat"
)

// detectOutput is the /predict-shaped answer of `worker detect`, with the generated ids.
type detectOutput struct {
	httpcompat.PredictResponse
	Tokens []int32 `json:"tokens"`
}

// runDetect implements `worker detect`: one image, one query, straight through the engine,
// no queue and no server. The quickest way to try a checkpoint.
func runDetect(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	weights := fs.String("weights", os.Getenv("LA_WEIGHTS_DIR"), "checkpoint directory (default $LA_WEIGHTS_DIR, else the bundled model)")
	imagePath := fs.String("image", "", "image file (PNG, JPEG, GIF, WebP)")
	query := fs.String("query", "", "what to find; several categories joined with </c>")
	task := fs.String("task", string(engine.TaskDetect), "detect, ground, ground_one, point, text or region")
	maxNew := fs.Int("max-new-tokens", 128, "token budget")
	inTokenLimit := fs.Int("in-token-limit", 0, "most image patches before the image is shrunk (0 = the checkpoint's)")
	grid := fs.String("grid", "native", "vision grid: native, or HxW in 14-px patches (even sides)")
	overlayPath := fs.String("overlay", "", "write the overlay PNG here")
	threads := fs.Int("threads", 0, "CPU threads (0 = one per CPU)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\nusage: worker detect --weights DIR --image FILE --query TEXT [--task T] [--max-new-tokens N] [--in-token-limit N] [--grid native|HxW] [--overlay OUT.png]", err)
	}
	if *imagePath == "" || *query == "" && *task != string(engine.TaskText) {
		return fmt.Errorf("detect needs --image and --query")
	}
	choice, err := chooseWeights(context.Background(), *weights)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(*imagePath)
	if err != nil {
		return fmt.Errorf("reading the image: %w", err)
	}

	// Native backends bind to one OS thread: open, generate and close on this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := pipeline.Open(pipeline.OpenOptions{
		WeightsDir:      choice.Dir,
		ModelName:       choice.Model,
		Backend:         "cpu",
		Threads:         *threads,
		MaxSeqLen:       4096,
		MaxBatch:        1,
		InTokenLimit:    *inTokenLimit,
		CanonGrid:       *grid,
		MaxNewTokens:    max(*maxNew, 1),
		MaxNewTokensCap: max(*maxNew, 1024),
	})
	if err != nil {
		return err
	}
	defer p.Close()

	ctx := context.Background()
	prep, err := p.Prepare(ctx, engine.Request{Image: data, Query: *query, Task: engine.Task(*task), MaxNewTokens: *maxNew})
	if err != nil {
		return err
	}
	pred, err := p.Generate(ctx, prep)
	if err != nil {
		return err
	}
	if *overlayPath != "" {
		png, err := p.Overlay(prep, pred)
		if err != nil {
			return err
		}
		if err := os.WriteFile(*overlayPath, png, 0o644); err != nil {
			return fmt.Errorf("writing the overlay: %w", err)
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // raw_text is full of <ref> and <box>: print them as the model wrote them
	return enc.Encode(detectOutput{PredictResponse: httpcompat.NewPredictResponse(pred, nil), Tokens: pred.Tokens})
}
