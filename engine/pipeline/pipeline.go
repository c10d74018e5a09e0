// Package pipeline is the engine.Engine that ties the host-side parts together: imageproc
// (decode, resize, patchify), tokenizer and prompt (the chat prompt), a native Backend driven
// by the greedy loop, answer (boxes and points) and overlay (the picture).
package pipeline

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/answer"
	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/engine/prompt"
	"github.com/locateanything/detect/engine/tokenizer"
)

// Config holds the host-side settings of a Pipeline.
type Config struct {
	Preprocess      imageproc.Options // from preprocessor_config.json and the LA_* knobs
	MaxSeqLen       int               // prompt + generated tokens must fit
	MaxNewTokens    int               // default budget (LA_MAX_NEW_TOKENS)
	MaxNewTokensCap int               // hard cap (LA_MAX_NEW_TOKENS_CAP)
	EOS             int32             // <|im_end|>
	Info            engine.Info       // what Info() reports; limits are filled in by New
}

// Pipeline implements engine.Engine over one Backend.
type Pipeline struct {
	backend engine.Backend
	tok     *tokenizer.Tokenizer
	cfg     Config
	closers []func() error // run after the backend's Close, in order
	png     *overlay.Encoder
}

var _ engine.Engine = (*Pipeline)(nil)

// New builds a Pipeline. closers run after the backend is closed (the checkpoint's mapping,
// say).
func New(b engine.Backend, tok *tokenizer.Tokenizer, cfg Config, closers ...func() error) (*Pipeline, error) {
	if err := cfg.Preprocess.Validate(); err != nil {
		return nil, fmt.Errorf("preprocessing options: %w", err)
	}
	if cfg.MaxNewTokens < 1 || cfg.MaxNewTokensCap < cfg.MaxNewTokens {
		return nil, fmt.Errorf("token budget: default %d and cap %d must satisfy 1 <= default <= cap",
			cfg.MaxNewTokens, cfg.MaxNewTokensCap)
	}
	if cfg.MaxSeqLen <= cfg.MaxNewTokens {
		return nil, fmt.Errorf("max sequence length %d leaves no room for a prompt and %d new tokens",
			cfg.MaxSeqLen, cfg.MaxNewTokens)
	}
	cfg.Info.Backend = b.Name()
	cfg.Info.CanonicalGrid = cfg.Preprocess.CanonGrid
	cfg.Info.InTokenLimit = cfg.Preprocess.InTokenLimit
	cfg.Info.MaxSeqLen = cfg.MaxSeqLen
	cfg.Info.MaxNewTokens = cfg.MaxNewTokens
	cfg.Info.MaxNewTokensCap = cfg.MaxNewTokensCap
	cfg.Info.MaxQueryChars = engine.MaxQueryChars
	return &Pipeline{backend: b, tok: tok, cfg: cfg, closers: closers, png: overlay.NewEncoder()}, nil
}

// Info describes the loaded model.
func (p *Pipeline) Info() engine.Info { return p.cfg.Info }

// Prepare validates the request and does all host work before the device.
func (p *Pipeline) Prepare(ctx context.Context, req engine.Request) (*engine.Prepared, error) {
	start := time.Now()
	if req.Task == "" {
		req.Task = engine.TaskDetect
	}
	if !req.Task.Valid() {
		return nil, engine.InputErrorf(engine.CodeBadTask, "task %q is not one of %v", req.Task, engine.Tasks)
	}
	if n := utf8.RuneCountInString(req.Query); n > engine.MaxQueryChars {
		return nil, engine.InputErrorf(engine.CodeBadQuery, "query is %d characters, the limit is %d", n, engine.MaxQueryChars)
	} else if n == 0 && !(req.Task == engine.TaskText) {
		return nil, engine.InputErrorf(engine.CodeBadQuery, "query is empty: give 1-%d characters", engine.MaxQueryChars)
	}
	budget := req.MaxNewTokens
	if budget == 0 {
		budget = p.cfg.MaxNewTokens
	}
	if budget < 1 || budget > p.cfg.MaxNewTokensCap {
		return nil, engine.InputErrorf(engine.CodeBadBudget, "max_new_tokens %d is outside 1..%d", req.MaxNewTokens, p.cfg.MaxNewTokensCap)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	img, _, err := p.cfg.Preprocess.Decode(req.Image)
	if err != nil {
		return nil, err
	}
	res, err := imageproc.Preprocess(img, p.cfg.Preprocess)
	if err != nil {
		return nil, err
	}
	merge := p.cfg.Preprocess.MergeKernel
	nImage := res.GridH * res.GridW / (merge * merge)
	ids, err := prompt.Tokens(p.tok, req.Task, req.Query, nImage)
	if err != nil {
		return nil, err
	}
	if err := prompt.CheckBudget(len(ids), budget, p.cfg.MaxSeqLen); err != nil {
		return nil, err
	}
	b := img.Bounds()
	return &engine.Prepared{
		Request:        req,
		Image:          img,
		Width:          b.Dx(),
		Height:         b.Dy(),
		CanonW:         res.Width,
		CanonH:         res.Height,
		GridH:          res.GridH,
		GridW:          res.GridW,
		Patches:        res.Patches,
		PromptIDs:      ids,
		NumImageTokens: nImage,
		MaxNewTokens:   budget,
		PreprocessMS:   ms(time.Since(start)),
	}, nil
}

// Generate runs the device part and parses the answer.
func (p *Pipeline) Generate(ctx context.Context, prep *engine.Prepared) (*engine.Prediction, error) {
	gen, err := Greedy(ctx, p.backend, prep, p.cfg.EOS)
	if err != nil {
		return nil, err
	}
	raw := p.tok.Decode(gen.Tokens)
	dets, pts := answer.Parse(raw, prep.Width, prep.Height)
	vision, prefill, decode := ms(gen.Vision), ms(gen.Prefill), ms(gen.Decode)
	return &engine.Prediction{
		Query:              prep.Request.Query,
		Width:              prep.Width,
		Height:             prep.Height,
		CanonicalSize:      [2]int{prep.CanonW, prep.CanonH},
		GridHW:             [2]int{prep.GridH, prep.GridW},
		NumImageTokens:     prep.NumImageTokens,
		PromptTokens:       len(prep.PromptIDs),
		PrefillTokens:      p.backend.PrefillLength(len(prep.PromptIDs)),
		RawText:            raw,
		Detections:         dets,
		Points:             pts,
		NumGeneratedTokens: len(gen.Tokens),
		StoppedOnEOS:       gen.StoppedOnEOS,
		DecodeMode:         p.cfg.Info.DecodeMode,
		TimingMS: engine.Timing{
			Vision:     vision,
			Prefill:    prefill,
			Decode:     decode,
			Total:      prep.PreprocessMS + vision + prefill + decode,
			DecodeTokS: round2(gen.DecodeTokensPerSecond()),
		},
		Tokens: gen.Tokens,
	}, nil
}

// Overlay draws the prediction on the original image as PNG.
func (p *Pipeline) Overlay(prep *engine.Prepared, pred *engine.Prediction) ([]byte, error) {
	if prep.Image == nil {
		return nil, fmt.Errorf("overlay: the prepared request has no decoded image")
	}
	return p.png.EncodePNG(overlay.Draw(prep.Image, pred.Detections, pred.Points))
}

// Close closes the backend, then whatever New was given to close after it.
func (p *Pipeline) Close() error {
	err := p.backend.Close()
	for _, c := range p.closers {
		if cerr := c(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

func ms(d time.Duration) float64 { return round2(float64(d) / float64(time.Millisecond)) }

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
