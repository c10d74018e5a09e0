package bench

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/locateanything/detect/bench/machine"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
)

// stageTimes is one run of the three stages, with the memory bandwidth measured right
// before it (on a shared machine the bandwidth available moves with the load, so each
// decode run is compared with its own neighbour).
type stageTimes struct {
	vision, prefill, decode time.Duration
	steps                   []time.Duration // each decode step
	decodeCPU               time.Duration   // process CPU time during the decode steps
	triadGBps               float64
}

// inputs are the synthetic inputs of every run.
type inputs struct {
	patches []float32
	ids     []int32
}

// makeInputs makes patches in [-1, 1] and a prompt of o.prompt ids: ordinary tokens
// around the image tokens, as in the chat template. The seed is fixed, so every run and
// every invocation decodes the same tokens.
func makeInputs(c *checkpoint.Config, o options, sh shapes) inputs {
	rng := rand.New(rand.NewPCG(1, 2))
	p := make([]float32, o.gridH*o.gridW*3*c.Vision.PatchSize*c.Vision.PatchSize)
	for i := range p {
		p[i] = 2*rng.Float32() - 1
	}
	ids := make([]int32, o.prompt)
	prefix := min(15, (o.prompt-sh.imageTokens)/2) // system and user header, as in the real prompt
	for i := range ids {
		switch {
		case i >= prefix && i < prefix+sh.imageTokens:
			ids[i] = int32(c.ImageTokenID)
		default:
			ids[i] = int32(1000 + rng.IntN(min(c.Text.Vocab, 150000)-1000))
		}
	}
	return inputs{patches: p, ids: ids}
}

// timedRuns runs the optional warm-up (a short untimed request that faults in the
// mapped weights), then o.runs timed requests, each right after its own short STREAM
// triad so decode can be held against the bandwidth of its moment.
func timedRuns(b engine.Backend, in inputs, o options) ([]stageTimes, error) {
	if o.warmup {
		if _, err := runOnce(b, in, o, min(o.tokens, 4)); err != nil {
			return nil, err
		}
	}
	var runs []stageTimes
	for range o.runs {
		_, triad, err := machine.MemoryBandwidth(o.streamMiB, o.threads, 3)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		st, err := runOnce(b, in, o, o.tokens)
		if err != nil {
			return nil, err
		}
		st.triadGBps = triad
		runs = append(runs, st)
	}
	return runs, nil
}

// runOnce times one request: vision, prefill and tokens decode steps, each step on its
// own (for the percentiles) and the process CPU time of the decode (for decode/cpu).
func runOnce(b engine.Backend, in inputs, o options, tokens int) (stageTimes, error) {
	var st stageTimes
	if err := b.Reset(); err != nil {
		return st, err
	}
	t0 := time.Now()
	if err := b.Vision(in.patches, o.gridH, o.gridW); err != nil {
		return st, err
	}
	var g greedy
	t1 := time.Now()
	tok, err := g.prefill(b, 0, in.ids)
	if err != nil {
		return st, err
	}
	slot, next := []int{0}, []int32{0}
	t2 := time.Now()
	cpu0 := processCPUTime()
	steps := make([]time.Duration, 0, tokens)
	last := t2
	for range tokens {
		if err = g.decode(b, slot, []int32{tok}, next); err != nil {
			return st, err
		}
		tok = next[0]
		now := time.Now()
		steps = append(steps, now.Sub(last))
		last = now
	}
	return stageTimes{vision: t1.Sub(t0), prefill: t2.Sub(t1), decode: last.Sub(t2), steps: steps,
		decodeCPU: processCPUTime() - cpu0}, nil
}

// processCPUTime is the CPU time (user + system) of the whole process so far.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
