// Package pipeline is the engine.Engine that ties the host-side parts together: imageproc
// (decode, resize, patchify), tokenizer and prompt (the chat prompt), a native Backend driven
// by the greedy loop, answer (boxes and points) and overlay (the picture).
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/answer"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/imageproc"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/engine/prompt"
	"github.com/locateanything/detect/engine/tokenizer"
)

// Config holds the host-side settings of a Pipeline.
type Config struct {
	Preprocess      imageproc.Options     // from preprocessor_config.json and the LA_* knobs
	MaxSeqLen       int                   // prompt + generated tokens must fit
	MaxNewTokens    int                   // default budget (LA_MAX_NEW_TOKENS)
	MaxNewTokensCap int                   // hard cap (LA_MAX_NEW_TOKENS_CAP)
	EOS             int32                 // <|im_end|>
	GenerationMode  engine.GenerationMode // default for requests that name none (LA_GENERATION_MODE); "" = ar
	Info            engine.Info           // what Info() reports; limits are filled in by New

	// Hybrid holds the token ids parallel box decoding reads (from the checkpoint's
	// config.json); nil when the checkpoint cannot run it, and NoHybrid then says why.
	// Hybrid requests are refused without them.
	Hybrid   *blockdecode.Tokens
	NoHybrid error
}

// Pipeline implements engine.Engine and engine.Batcher over one Backend.
type Pipeline struct {
	backend engine.Backend
	tok     *tokenizer.Tokenizer
	cfg     Config
	closers []func() error // run after the backend's Close, in order
	png     *overlay.Encoder

	// The device side runs on one thread, but Generate and the Batcher methods both take
	// slots, so the free list has a lock rather than an ownership rule.
	mu   sync.Mutex
	used []bool // by slot
	st   *stepper
}

var _ engine.Batcher = (*Pipeline)(nil)

// New builds a Pipeline. closers run after the backend is closed (the checkpoint's mapping,
// say).
func New(b engine.Backend, tok *tokenizer.Tokenizer, cfg Config, closers ...func() error) (*Pipeline, error) {
	if err := cfg.Preprocess.Validate(); err != nil {
		return nil, fmt.Errorf("preprocessing options: %w", err)
	}
	if !engine.BudgetFits(cfg.MaxNewTokens, cfg.MaxNewTokensCap) { // a caller's slip: Settings.Validate refuses it first
		return nil, fmt.Errorf("token budget: default %d and cap %d must satisfy 1 <= default <= cap",
			cfg.MaxNewTokens, cfg.MaxNewTokensCap)
	}
	if cfg.MaxSeqLen <= cfg.MaxNewTokens {
		return nil, fmt.Errorf("max sequence length %d leaves no room for a prompt and %d new tokens",
			cfg.MaxSeqLen, cfg.MaxNewTokens)
	}
	cfg.Info.Backend = engine.BackendKind(b.Name()) // the kind it was opened as (a test double's own name)
	cfg.Info.CanonicalGrid = cfg.Preprocess.CanonGrid
	cfg.Info.InTokenLimit = cfg.Preprocess.InTokenLimit
	cfg.Info.MaxSeqLen = cfg.MaxSeqLen
	cfg.Info.MaxNewTokens = cfg.MaxNewTokens
	cfg.Info.MaxNewTokensCap = cfg.MaxNewTokensCap
	cfg.Info.MaxQueryChars = engine.MaxQueryChars
	if b.MaxBatch() < 1 {
		return nil, fmt.Errorf("backend %s has %d sequence slots", b.Name(), b.MaxBatch())
	}
	if cfg.GenerationMode != "" && !cfg.GenerationMode.Valid() { // a caller's slip: Settings.Validate refuses it first
		return nil, fmt.Errorf("generation mode %q is not one of %v", cfg.GenerationMode, engine.GenerationModes)
	}
	cfg.Info.GenerationModes = []engine.GenerationMode{engine.GenerationAR}
	p := &Pipeline{backend: b, tok: tok, cfg: cfg, closers: closers, png: overlay.NewEncoder(),
		used: make([]bool, b.MaxBatch()), st: newStepper(cfg.EOS, cfg.Hybrid)}
	if cfg.Hybrid != nil {
		if cfg.Hybrid.IMEnd != cfg.EOS {
			return nil, fmt.Errorf("hybrid decoding's <|im_end|> is %d, the EOS %d", cfg.Hybrid.IMEnd, cfg.EOS)
		}
		p.cfg.Info.GenerationModes = []engine.GenerationMode{engine.GenerationAR, engine.GenerationHybrid}
	} else if cfg.GenerationMode == engine.GenerationHybrid {
		return nil, fmt.Errorf("generation mode hybrid by default, but the model cannot decode in hybrid mode: %w",
			cmp.Or(cfg.NoHybrid, errors.New("no token ids for it")))
	}
	return p, nil
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
	if err := engine.BudgetError(float64(budget), p.cfg.MaxNewTokensCap); err != nil {
		return nil, err
	}
	mode, err := p.generationMode(req.GenerationMode)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Decoding and resizing a large image take seconds: ctx (a cancel, a deadline, the
	// end of a shutdown's grace) stops them between reads and stripes of rows.
	img, _, err := p.cfg.Preprocess.DecodeContext(ctx, req.Image)
	if err != nil {
		return nil, err
	}
	res, err := imageproc.PreprocessContext(ctx, img, p.cfg.Preprocess)
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
	// A block step reads five positions past the last committed token, and the last block
	// step may start with one token of the budget left.
	if extra := blockdecode.Size - 2; mode == engine.GenerationHybrid && len(ids)+budget+extra > p.cfg.MaxSeqLen {
		return nil, engine.InputErrorf(engine.CodePromptTooLong,
			"prompt of %d tokens plus max_new_tokens %d and the %d positions a hybrid block reads past them need %d, over the context limit of %d",
			len(ids), budget, extra, len(ids)+budget+extra, p.cfg.MaxSeqLen)
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
		GenerationMode: mode,
		Warnings:       prompt.QueryWarnings(req.Task, req.Query),
		PreprocessMS:   ms(time.Since(start)),
	}, nil
}

// generationMode resolves a request's generation mode: its own, else the engine's
// default, else AR.
func (p *Pipeline) generationMode(asked engine.GenerationMode) (engine.GenerationMode, error) {
	mode := cmp.Or(asked, p.cfg.GenerationMode, engine.GenerationAR)
	if !mode.Valid() {
		return "", engine.InputErrorf(engine.CodeBadGeneration, "generation_mode %q is not one of %v", asked, engine.GenerationModes)
	}
	if mode == engine.GenerationHybrid && p.cfg.Hybrid == nil {
		why := "its config.json lacks the ids parallel box decoding reads"
		if p.cfg.NoHybrid != nil {
			why = p.cfg.NoHybrid.Error()
		}
		return "", engine.InputErrorf(engine.CodeBadGeneration, "generation_mode hybrid: model %s cannot decode in hybrid mode: %s",
			p.cfg.Info.Model, why)
	}
	return mode, nil
}

// MaxBatch is the number of sequences the backend decodes together.
func (p *Pipeline) MaxBatch() int { return len(p.used) }

// takeSlot marks the lowest free slot used.
func (p *Pipeline) takeSlot() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, u := range p.used {
		if !u {
			p.used[i] = true
			return i, nil
		}
	}
	return 0, ErrNoFreeSlot
}

func (p *Pipeline) freeSlot(slot int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used[slot] = false
}

// Generate runs one request alone (vision, prefill, the decode loop) and parses the answer.
func (p *Pipeline) Generate(ctx context.Context, prep *engine.Prepared) (*engine.Prediction, error) {
	slot, err := p.takeSlot()
	if err != nil {
		return nil, err
	}
	defer p.freeSlot(slot)
	s, err := p.st.alone(ctx, p.backend, prep, slot)
	if err != nil {
		return nil, err
	}
	return p.predict(s), nil
}

// Start runs vision and prefill for prep in a free slot.
func (p *Pipeline) Start(prep *engine.Prepared) (*engine.Sequence, error) {
	slot, err := p.takeSlot()
	if err != nil {
		return nil, err
	}
	s, err := p.st.start(p.backend, prep, slot)
	if err != nil {
		// A failed prefill may have written part of the slot's cache.
		if rerr := p.backend.Release(slot); rerr != nil {
			err = errors.Join(err, fmt.Errorf("releasing slot %d: %w", slot, rerr))
		}
		p.freeSlot(slot)
		return nil, err
	}
	return s, nil
}

// Step advances every sequence in seqs by one step: the AR ones by one token in one greedy
// step call, exactly as alone, and the hybrid ones together in one block step call.
func (p *Pipeline) Step(seqs []*engine.Sequence) error {
	return p.st.step(p.backend, seqs)
}

// Finish frees the sequence's slot and parses its answer.
func (p *Pipeline) Finish(s *engine.Sequence) (*engine.Prediction, error) {
	if err := p.Abandon(s); err != nil {
		return nil, err
	}
	return p.predict(s), nil
}

// Abandon frees the sequence's slot.
func (p *Pipeline) Abandon(s *engine.Sequence) error {
	defer p.freeSlot(s.Slot)
	if err := p.backend.Release(s.Slot); err != nil {
		return fmt.Errorf("releasing slot %d: %w", s.Slot, err)
	}
	return nil
}

// predict parses a finished sequence's answer.
func (p *Pipeline) predict(s *engine.Sequence) *engine.Prediction {
	prep := s.Prepared
	raw, ends := p.tok.DecodeEnds(s.Tokens)
	dets, pts := answer.ParseScored(raw, ends, s.Probs, prep.Width, prep.Height)
	vision, prefill, decode := ms(s.Vision), ms(s.Prefill), ms(s.Decode)
	decodeMode := p.cfg.Info.DecodeMode
	if s.Mode == engine.GenerationHybrid {
		decodeMode = DecodeModeHybrid
	}
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
		NumGeneratedTokens: len(s.Tokens),
		StoppedOnEOS:       s.StoppedOnEOS,
		DecodeMode:         decodeMode,
		GenerationMode:     s.Mode,
		DecodeSteps:        s.DecodeSteps,
		TimingMS: engine.Timing{
			Vision:     vision,
			Prefill:    prefill,
			Decode:     decode,
			Total:      prep.PreprocessMS + vision + prefill + decode,
			DecodeTokS: round2(s.DecodeTokensPerSecond()),
		},
		Tokens:    s.Tokens,
		Probs:     s.Probs,
		Batch:     s.LargestBatch,
		Warnings:  prep.Warnings,
		Simulated: p.cfg.Info.Simulated,
	}
}

// Overlay draws the prediction on the original image as PNG.
func (p *Pipeline) Overlay(prep *engine.Prepared, pred *engine.Prediction) ([]byte, error) {
	if prep.Image == nil {
		return nil, fmt.Errorf("overlay: the prepared request has no decoded image")
	}
	return p.png.EncodePNG(overlay.Options{Simulated: pred.Simulated}.Draw(prep.Image, pred.Detections, pred.Points))
}

// Backend is the backend the Pipeline drives, for a tool that times the device side on
// its own (`worker bench`) on the engine the service would open. Nothing else may drive it
// while the Pipeline serves requests; close the Pipeline, not the backend.
func (p *Pipeline) Backend() engine.Backend { return p.backend }

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
