package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/locateanything/detect/engine"
)

// Generation is what one greedy run produced.
type Generation struct {
	Tokens       []int32 // generated ids, EOS included when it was generated
	StoppedOnEOS bool
	Vision       time.Duration
	Prefill      time.Duration // includes the first token
	Decode       time.Duration // all decode steps after the first token
	DecodeSteps  int
}

// DecodeTokensPerSecond is the decode rate over the steps after the first token.
func (g *Generation) DecodeTokensPerSecond() float64 {
	if g.DecodeSteps == 0 || g.Decode <= 0 {
		return 0
	}
	return float64(g.DecodeSteps) / g.Decode.Seconds()
}

// Greedy runs vision, prefill and the decode loop on b: it stops on eos, when maxNew tokens
// have been generated, or when ctx is cancelled (checked before vision and between decode
// steps; the returned error then wraps ctx.Err()). The backend is reset afterwards whatever
// happened, so the next request starts clean.
func Greedy(ctx context.Context, b engine.Backend, p *engine.Prepared, eos int32) (gen *Generation, err error) {
	if p.MaxNewTokens < 1 {
		return nil, fmt.Errorf("token budget %d: need at least 1", p.MaxNewTokens)
	}
	defer func() {
		if rerr := b.Reset(); rerr != nil && err == nil {
			gen, err = nil, fmt.Errorf("resetting the %s backend: %w", b.Name(), rerr)
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("before vision: %w", err)
	}
	gen = &Generation{Tokens: make([]int32, 0, p.MaxNewTokens)}

	start := time.Now()
	if err := b.Vision(p.Patches, p.GridH, p.GridW); err != nil {
		return nil, fmt.Errorf("vision on a %dx%d grid: %w", p.GridH, p.GridW, err)
	}
	gen.Vision = time.Since(start)

	start = time.Now()
	tok, err := b.Prefill(p.PromptIDs)
	if err != nil {
		return nil, fmt.Errorf("prefill of %d tokens: %w", len(p.PromptIDs), err)
	}
	gen.Prefill = time.Since(start)

	start = time.Now()
	defer func() {
		if gen != nil {
			gen.Decode = time.Since(start)
		}
	}()
	for {
		gen.Tokens = append(gen.Tokens, tok)
		if tok == eos {
			gen.StoppedOnEOS = true
			return gen, nil
		}
		if len(gen.Tokens) >= p.MaxNewTokens {
			return gen, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("after %d generated tokens: %w", len(gen.Tokens), err)
		}
		if tok, err = b.Decode(tok); err != nil {
			return nil, fmt.Errorf("decode step %d: %w", len(gen.Tokens), err)
		}
		gen.DecodeSteps++
	}
}
