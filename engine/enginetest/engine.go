// Package enginetest is the engine.Engine double for every test in the repository that needs
// an engine (the chip owner, the job runner, the /predict shim, the submit CLI, the worker):
// no model and no device, but real image-header decoding, the engine's input errors,
// predictions that follow the query, and a real PNG overlay. It imports only engine, so any
// package's tests may use it. Do not use it in production code.
package enginetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"image/draw"
	_ "image/jpeg" // the engine accepts JPEG
	"image/png"
	"maps"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
)

// NothingLabel is a category the double never finds: a query of only this label yields
// no detections, so tests can check the empty answer.
const NothingLabel = "unicorn"

// MaxPixels is the pixel budget Prepare enforces from the image header, the real engine's
// default (imageproc.DefaultMaxPixels): a larger image is an InputError with
// engine.CodeImageTooLarge.
const MaxPixels = 40_000_000

// FixedTiming is the timing every prediction reports, whatever Delay is, so responses are
// deterministic; decode time grows with the generated tokens.
var FixedTiming = engine.Timing{Vision: 49, Prefill: 58}

// DefaultInfo describes the double as the validated deployment describes itself.
func DefaultInfo() engine.Info {
	return engine.Info{
		Model:           "LocateAnything-3B",
		Backend:         "double",
		Device:          "test double",
		DecodeMode:      "ar_greedy",
		Precision:       "none",
		WeightsDir:      "/weights/nvidia--LocateAnything-3B",
		WeightsRepo:     "nvidia/LocateAnything-3B",
		WeightsRevision: "c32291ca5e996f5a7a485845b4f57a233936bba0",
		CanonicalGrid:   [2]int{24, 44},
		InTokenLimit:    1024,
		MaxSeqLen:       4096,
		MaxNewTokens:    128,
		MaxNewTokensCap: 1024,
		MaxQueryChars:   1000,
	}
}

// Engine is the double. Set its exported fields before first use and leave them alone
// afterwards; the methods are safe for concurrent use. The zero hooks make Generate answer
// at once.
//
// Generate takes these steps in order: OnCall; it records the call (Seen, Calls,
// MaxConcurrent); it sends the query on Started; it waits at the Release gate unless the
// call is one of the first Allowed; it holds the device for Delay; it fails with Err;
// otherwise it answers and counts the answer (Answers). A ctx that ends at the gate or
// during Delay ends the call with an error wrapping ctx.Err(), as the real engine's decode
// loop does (Canceled counts those calls).
type Engine struct {
	Description engine.Info // what Info returns; New fills it with DefaultInfo

	// OnCall, when set, runs first in every Prepare, Generate, Overlay and Close, on the
	// caller's goroutine, with the method's name ("Prepare", "Generate", "Overlay",
	// "Close") and the request's query ("" for Close). A test may record the calling OS
	// thread in it, or panic in it to stand for a bug in the engine.
	OnCall func(method, query string)

	Started chan<- string   // when set, receives each query as Generate begins (Generate blocks on a full channel)
	Release <-chan struct{} // when set, the gate: Generate waits for it to close (or ctx) before answering
	Allowed int             // with Release set, this many Generate calls pass the gate without waiting; later ones wait
	Delay   time.Duration   // device time of every Generate, after the gate: its decode steps (ctx cuts it short)
	Err     error           // when set, every Generate fails with it after Delay (a device failure, not an InputError)

	mu        sync.Mutex
	seen      []string                  // queries, as Generate calls began
	calls     map[string]int            // Generate calls begun, by query
	answers   map[[sha256.Size]byte]int // predictions returned, by image
	passed    int                       // calls let through the gate without waiting
	canceled  int
	active    int
	maxActive int
	closes    int
}

// New returns a double with DefaultInfo.
func New() *Engine { return &Engine{Description: DefaultInfo()} }

var _ engine.Engine = (*Engine)(nil)

// promptOverhead is the prompt length without image tokens and query: the chat template
// around them (303 tokens in all for "car" with 264 image tokens, as in the reference).
const promptOverhead = 303 - 264 - 1

// Prepare decodes the image header and checks the request the way the engine does: bad
// input is an *engine.InputError with the engine's code.
func (e *Engine) Prepare(ctx context.Context, req engine.Request) (*engine.Prepared, error) {
	if e.OnCall != nil {
		e.OnCall("Prepare", req.Query)
	}
	return e.prepare(ctx, req)
}

func (e *Engine) prepare(ctx context.Context, req engine.Request) (*engine.Prepared, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	info := e.Description
	if req.Task == "" {
		req.Task = engine.TaskDetect
	}
	if !req.Task.Valid() {
		return nil, engine.InputErrorf(engine.CodeBadTask, "unknown task %q", req.Task)
	}
	if n := utf8.RuneCountInString(req.Query); n == 0 || n > info.MaxQueryChars {
		return nil, engine.InputErrorf(engine.CodeBadQuery, "query must be 1-%d characters, got %d", info.MaxQueryChars, n)
	}
	budget := req.MaxNewTokens
	if budget == 0 {
		budget = info.MaxNewTokens
	}
	if err := engine.BudgetError(float64(budget), info.MaxNewTokensCap); err != nil {
		return nil, err
	}
	// The header is enough to check the image and size the answer; Overlay decodes the
	// pixels only when they are needed, which keeps tests under the race detector quick.
	cfg, _, err := image.DecodeConfig(bytes.NewReader(req.Image))
	if err != nil {
		return nil, engine.InputErrorf(engine.CodeBadImage, "cannot decode image: %v", err)
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > MaxPixels {
		return nil, engine.InputErrorf(engine.CodeImageTooLarge,
			"image is %dx%d (%d pixels), over the budget of %d", cfg.Width, cfg.Height, px, MaxPixels)
	}
	gh, gw := info.CanonicalGrid[0], info.CanonicalGrid[1]
	if gh == 0 || gw == 0 { // native grid: multiples of 28 px
		gh, gw = 2*((cfg.Height+27)/28), 2*((cfg.Width+27)/28)
	}
	imageTokens := gh * gw / 4
	prompt := promptOverhead + imageTokens + len(req.Query) // one token per byte: pessimistic
	if prompt+budget > info.MaxSeqLen {
		return nil, engine.InputErrorf(engine.CodePromptTooLong,
			"prompt of %d tokens plus max_new_tokens %d exceeds the context of %d", prompt, budget, info.MaxSeqLen)
	}
	return &engine.Prepared{
		Request:        req,
		Width:          cfg.Width,
		Height:         cfg.Height,
		CanonW:         gw * 14,
		CanonH:         gh * 14,
		GridH:          gh,
		GridW:          gw,
		PromptIDs:      make([]int32, prompt),
		NumImageTokens: imageTokens,
		MaxNewTokens:   budget,
	}, nil
}

// Generate answers with one box (or point, for TaskPoint) per </c>-separated label, at a
// position derived from the label, after the steps the Engine type describes. After Close
// it fails.
func (e *Engine) Generate(ctx context.Context, p *engine.Prepared) (*engine.Prediction, error) {
	query := p.Request.Query
	if e.OnCall != nil {
		e.OnCall("Generate", query)
	}
	e.mu.Lock()
	if e.closes > 0 {
		e.mu.Unlock()
		return nil, errors.New("generate: engine is closed")
	}
	e.seen = append(e.seen, query)
	if e.calls == nil {
		e.calls = map[string]int{}
	}
	e.calls[query]++
	e.active++
	e.maxActive = max(e.maxActive, e.active)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.active--
		e.mu.Unlock()
	}()

	if e.Started != nil {
		e.Started <- query
	}
	if e.Release != nil && !e.pass() {
		select {
		case <-e.Release:
		case <-ctx.Done():
			return nil, e.cancel(ctx)
		}
	}
	if e.Delay > 0 {
		t := time.NewTimer(e.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, e.cancel(ctx)
		}
	}
	if e.Err != nil {
		return nil, e.Err
	}
	pred := e.answer(p)
	e.mu.Lock()
	if e.answers == nil {
		e.answers = map[[sha256.Size]byte]int{}
	}
	e.answers[sha256.Sum256(p.Request.Image)]++
	e.mu.Unlock()
	return pred, nil
}

// pass reports whether a call may go through the gate without waiting: one of the first
// Allowed.
func (e *Engine) pass() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.passed < e.Allowed {
		e.passed++
		return true
	}
	return false
}

// cancel counts a call that ctx ended and returns its error.
func (e *Engine) cancel(ctx context.Context) error {
	e.mu.Lock()
	e.canceled++
	e.mu.Unlock()
	return fmt.Errorf("decode: %w", ctx.Err())
}

// Answer is the prediction Generate gives for req once it answers, computed without
// Generate: no hooks, no counting, no waiting. A test compares what reached its output
// with it. Bad input is the InputError Prepare returns.
func (e *Engine) Answer(req engine.Request) (*engine.Prediction, error) {
	p, err := e.prepare(context.Background(), req)
	if err != nil {
		return nil, err
	}
	return e.answer(p), nil
}

// answer builds the deterministic prediction for p.
func (e *Engine) answer(p *engine.Prepared) *engine.Prediction {
	pred := &engine.Prediction{
		Query:          p.Request.Query,
		Width:          p.Width,
		Height:         p.Height,
		CanonicalSize:  [2]int{p.CanonW, p.CanonH},
		GridHW:         [2]int{p.GridH, p.GridW},
		NumImageTokens: p.NumImageTokens,
		PromptTokens:   len(p.PromptIDs),
		PrefillTokens:  nextPow2(len(p.PromptIDs)),
		Detections:     []engine.Detection{},
		Points:         []engine.Point{},
		DecodeMode:     e.Description.DecodeMode,
	}
	var raw strings.Builder
	tokens := 0
	truncated := false
	for _, label := range strings.Split(p.Request.Query, "</c>") {
		label = strings.TrimSpace(label)
		if label == "" || label == NothingLabel {
			continue
		}
		// <ref> label </ref> <box> coords </box>: one token per tag, coordinate and label.
		cost := 5 + 4
		if p.Request.Task == engine.TaskPoint {
			cost = 5 + 2
		}
		if tokens+cost > p.MaxNewTokens {
			truncated = true
			break
		}
		tokens += cost
		n := normalized(label)
		if p.Request.Task == engine.TaskPoint {
			xy := [2]int{(n[0] + n[2]) / 2, (n[1] + n[3]) / 2}
			fmt.Fprintf(&raw, "<ref>%s</ref><box><%d><%d></box>", label, xy[0], xy[1])
			pred.Points = append(pred.Points, engine.Point{
				Label:     label,
				Point:     [2]float64{pixel(xy[0], p.Width), pixel(xy[1], p.Height)},
				PointNorm: xy,
				Score:     score(label),
			})
			continue
		}
		fmt.Fprintf(&raw, "<ref>%s</ref><box><%d><%d><%d><%d></box>", label, n[0], n[1], n[2], n[3])
		pred.Detections = append(pred.Detections, engine.Detection{
			Label:   label,
			Box:     [4]float64{pixel(n[0], p.Width), pixel(n[1], p.Height), pixel(n[2], p.Width), pixel(n[3], p.Height)},
			BoxNorm: n,
			Score:   score(label),
		})
	}
	if len(pred.Detections) == 0 && len(pred.Points) == 0 && !truncated && p.MaxNewTokens >= 3 {
		raw.WriteString("<box>None</box>")
		tokens += 3
	}
	if !truncated && tokens < p.MaxNewTokens {
		raw.WriteString("<|im_end|>")
		tokens++
		pred.StoppedOnEOS = true
	}
	pred.RawText = raw.String()
	pred.NumGeneratedTokens = tokens
	pred.Tokens = make([]int32, tokens)
	pred.TimingMS = FixedTiming
	pred.TimingMS.Decode = float64(tokens) * 25
	pred.TimingMS.Total = pred.TimingMS.Vision + pred.TimingMS.Prefill + pred.TimingMS.Decode
	if pred.TimingMS.Decode > 0 {
		pred.TimingMS.DecodeTokS = float64(tokens) / (pred.TimingMS.Decode / 1000)
	}
	return pred
}

// normalized places a label's box in 0..1000 space, the same box for the same label.
func normalized(label string) [4]int {
	h := fnv.New32a()
	h.Write([]byte(label))
	v := h.Sum32()
	x1, y1 := int(v%500), int((v>>9)%500)
	return [4]int{x1, y1, x1 + 100 + int((v>>18)%400), y1 + 100 + int((v>>24)%200)}
}

// score is a label's score, 0.5..0.99, from a hash of it, as the real engine's 4 decimals.
func score(label string) float64 {
	h := fnv.New32a()
	h.Write([]byte("score:" + label))
	return 0.5 + float64(h.Sum32()%4900)/1e4
}

func pixel(norm, size int) float64 { return float64(norm) / 1000 * float64(size) }

func nextPow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// Overlay draws every box and point in red on the original image (p.Image, or the request's
// bytes decoded) and encodes a PNG.
func (e *Engine) Overlay(p *engine.Prepared, pred *engine.Prediction) ([]byte, error) {
	if e.OnCall != nil {
		query := ""
		if p != nil {
			query = p.Request.Query
		}
		e.OnCall("Overlay", query)
	}
	if p == nil {
		return nil, errors.New("overlay: nothing prepared")
	}
	src := p.Image
	if src == nil {
		var err error
		if src, _, err = image.Decode(bytes.NewReader(p.Request.Image)); err != nil {
			return nil, fmt.Errorf("overlay: decode image: %w", err)
		}
	}
	canvas := image.NewRGBA(src.Bounds())
	draw.Draw(canvas, canvas.Bounds(), src, src.Bounds().Min, draw.Src)
	red := color.RGBA{R: 255, A: 255}
	for _, d := range pred.Detections {
		outline(canvas, image.Rect(int(d.Box[0]), int(d.Box[1]), int(d.Box[2]), int(d.Box[3])), red)
	}
	for _, pt := range pred.Points {
		x, y := int(pt.Point[0]), int(pt.Point[1])
		outline(canvas, image.Rect(x-3, y-3, x+3, y+3), red)
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, canvas); err != nil {
		return nil, fmt.Errorf("overlay: encode png: %w", err)
	}
	return buf.Bytes(), nil
}

func outline(img *image.RGBA, r image.Rectangle, c color.Color) {
	r = r.Canon().Intersect(img.Bounds())
	for x := r.Min.X; x < r.Max.X; x++ {
		img.Set(x, r.Min.Y, c)
		img.Set(x, r.Max.Y-1, c)
	}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		img.Set(r.Min.X, y, c)
		img.Set(r.Max.X-1, y, c)
	}
}

// Info returns Description.
func (e *Engine) Info() engine.Info { return e.Description }

// Close marks the double closed; later Generate calls fail.
func (e *Engine) Close() error {
	if e.OnCall != nil {
		e.OnCall("Close", "")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closes++
	return nil
}

// Seen lists the queries of the Generate calls that began, in the order they began.
func (e *Engine) Seen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// Calls is the number of Generate calls that began with query, however they ended.
func (e *Engine) Calls(query string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[query]
}

// Answers counts the predictions Generate returned, by the SHA-256 of the request's image
// bytes; a call that failed or was canceled is not counted. The map is a copy.
func (e *Engine) Answers() map[[sha256.Size]byte]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.answers)
}

// Canceled is the number of Generate calls that ended because their ctx ended.
func (e *Engine) Canceled() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.canceled
}

// Closed is the number of times Close was called.
func (e *Engine) Closed() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closes
}

// MaxConcurrent is the largest number of Generate calls that ever ran at once.
func (e *Engine) MaxConcurrent() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.maxActive
}
