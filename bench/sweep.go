package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/locateanything/detect/bench/machine"
	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
)

// The batch sweep (--batch 1,2,4,8,16): aggregate decode tokens/s when B sequences are
// decoded together, one backend call per step for all of them. The largest B slots are
// prefilled once (untimed in the sweep); then each run times --tokens steps at every B in
// turn, right after its own STREAM triad, and the report gives per B the median over the
// runs next to the ceiling of that B: a step reads every weight once plus each row's KV
// cache up to its position, so at triad bandwidth it takes
// (weight bytes + B x KV bytes per row) / triad seconds for B tokens. On a machine shared
// with other work a whole run is rarely quiet, so the report also gives the
// 10th-percentile step of each B over all runs (its quiet moments).

// parseBatches reads "1,2,4,8,16": positive, distinct, ascending.
func parseBatches(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, usagef("bench: --batch %q: want ascending batch sizes 1..1024 like 1,2,4,8,16", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// sweepSeqLen is the cache length each slot needs: its prompt, the warm-up steps and every
// timed step of every run (the slots keep their sequences through the whole sweep).
func sweepSeqLen(o options) int {
	return o.prompt + sweepWarmupSteps + o.runs*len(o.batches)*o.tokens + 1
}

// sweepWarmupSteps untimed steps at the largest batch fault in the activations and caches.
const sweepWarmupSteps = 2

// sweepFill is the untimed part: one vision and prefill per slot.
type sweepFill struct {
	vision, prefill time.Duration // medians over the slots
}

// sweepRun is one run of the sweep: the triad before it and, per batch size, the time and
// process CPU time of its steps and the mean position its rows decoded at.
type sweepRun struct {
	triadGBps float64
	wall, cpu []time.Duration
	steps     [][]time.Duration // each step of each batch size
	meanPos   []float64
}

// runSweep fills the largest batch's slots and times the sweep.
func runSweep(b engine.Backend, in inputs, o options) (sweepFill, []sweepRun, error) {
	maxB := o.batches[len(o.batches)-1]
	var fill sweepFill
	toks := make([]int32, maxB)
	pos := make([]int, maxB)
	slots := make([]int, maxB)
	visions, prefills := make([]time.Duration, maxB), make([]time.Duration, maxB)
	var g greedy
	for s := range maxB {
		// Each slot its own image, so the rows of a step differ as in service.
		patches := slotPatches(in.patches, s)
		t0 := time.Now()
		if err := b.Vision(patches, o.gridH, o.gridW); err != nil {
			return fill, nil, fmt.Errorf("bench: sweep: vision for slot %d: %w", s, err)
		}
		t1 := time.Now()
		tok, err := g.prefill(b, s, in.ids)
		if err != nil {
			return fill, nil, fmt.Errorf("bench: sweep: prefill of slot %d: %w", s, err)
		}
		visions[s], prefills[s] = t1.Sub(t0), time.Since(t1)
		slots[s], toks[s], pos[s] = s, tok, len(in.ids)
	}
	slices.Sort(visions)
	slices.Sort(prefills)
	fill.vision, fill.prefill = visions[maxB/2], prefills[maxB/2]

	next := make([]int32, maxB)
	step := func(n int) error {
		if err := g.decode(b, slots[:n], toks[:n], next[:n]); err != nil {
			return fmt.Errorf("bench: sweep: decode step of %d slots: %w", n, err)
		}
		copy(toks[:n], next[:n])
		for i := range n {
			pos[i]++
		}
		return nil
	}
	for range sweepWarmupSteps {
		if err := step(maxB); err != nil {
			return fill, nil, err
		}
	}
	var runs []sweepRun
	for range o.runs {
		_, triad, err := machine.MemoryBandwidth(o.streamMiB, o.threads, 3)
		if err != nil {
			return fill, nil, fmt.Errorf("bench: %w", err)
		}
		r := sweepRun{triadGBps: triad}
		for _, n := range o.batches {
			var posSum int
			for i := range n {
				posSum += pos[i]
			}
			cpu0, t0 := processCPUTime(), time.Now()
			steps := make([]time.Duration, 0, o.tokens)
			last := t0
			for range o.tokens {
				if err := step(n); err != nil {
					return fill, nil, err
				}
				now := time.Now()
				steps = append(steps, now.Sub(last))
				last = now
			}
			r.steps = append(r.steps, steps)
			r.wall = append(r.wall, last.Sub(t0))
			r.cpu = append(r.cpu, processCPUTime()-cpu0)
			// positions attended: from posSum/n to posSum/n + tokens - 1 per row
			r.meanPos = append(r.meanPos, float64(posSum)/float64(n)+float64(o.tokens-1)/2)
		}
		runs = append(runs, r)
	}
	return fill, runs, nil
}

// slotPatches gives slot s its own image: the bench's patches for slot 0, a shuffled copy
// (fixed seed) for the others.
func slotPatches(p []float32, s int) []float32 {
	if s == 0 {
		return p
	}
	q := slices.Clone(p)
	rng := rand.New(rand.NewPCG(uint64(s), 17))
	rng.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
	return q
}

// sweepRow is the report's line for one batch size.
type sweepRow struct {
	batch                    int
	stepMs                   float64 // median step time
	tokPerSec, ratio         float64 // aggregate tokens/s, and over the first batch size's
	p10Ms                    float64 // 10th-percentile step over all runs
	p10TokPerSec, p10Ratio   float64
	ceiling, ofCeiling       float64 // tokens/s at the median triad, and the fraction reached
	cpuTokPerSec, kvMBPerRow float64
	gmacPerSec               float64 // weight multiply-adds per second (B x weights per step)
}

// decodeWeightElems counts the weights one decode step multiplies each row with: every
// decoder matrix and the LM head (or the tied embeddings), as decodeWeightBytes.
func decodeWeightElems(m *checkpoint.Model) float64 {
	var n float64
	count := func(t *checkpoint.Tensor) {
		e := 1.0
		for _, d := range t.Shape {
			e *= float64(d)
		}
		n += e
	}
	for i := range m.Tensors {
		if strings.HasPrefix(m.Tensors[i].Name, "language_model.model.layers.") {
			count(&m.Tensors[i])
		}
	}
	head := "language_model.model.embed_tokens.weight"
	if m.HasLMHead() {
		head = checkpoint.LMHeadName
	}
	if t, ok := m.Tensor(head); ok {
		count(t)
	}
	return n
}

// kvBytesPerToken is the key and value bytes one cached position holds (float32).
func kvBytesPerToken(c *checkpoint.Config) float64 {
	return float64(c.Text.Layers * 2 * c.Text.KVHeads * c.Text.HeadDim * 4)
}

// summariseSweep reduces the runs to one row per batch size.
func summariseSweep(m *checkpoint.Model, o options, runs []sweepRun) (rows []sweepRow, triad float64) {
	triads := make([]float64, len(runs))
	for i, r := range runs {
		triads[i] = r.triadGBps
	}
	slices.Sort(triads)
	triad = triads[len(triads)/2]
	weights := float64(decodeWeightBytes(m, o.quant))
	macs := decodeWeightElems(m)
	kv := kvBytesPerToken(m.Config)
	for j, n := range o.batches {
		wall := make([]time.Duration, len(runs))
		cpu := make([]time.Duration, len(runs))
		var steps []time.Duration
		var meanPos float64
		for i, r := range runs {
			wall[i], cpu[i] = r.wall[j], r.cpu[j]
			steps = append(steps, r.steps[j]...)
			meanPos += r.meanPos[j] / float64(len(runs))
		}
		slices.Sort(wall)
		slices.Sort(cpu)
		slices.Sort(steps)
		p10 := steps[len(steps)/10].Seconds()
		step := wall[len(wall)/2].Seconds() / float64(o.tokens)
		cpuStep := cpu[len(cpu)/2].Seconds() / float64(o.tokens)
		kvRow := kv * (meanPos + 1) // positions 0..pos are read
		bytes := weights + float64(n)*kvRow
		row := sweepRow{
			batch: n, stepMs: step * 1e3, tokPerSec: float64(n) / step,
			ceiling: float64(n) * triad * 1e9 / bytes, kvMBPerRow: kvRow / 1e6,
			gmacPerSec: float64(n) * macs / p10 / 1e9,
			p10Ms:      p10 * 1e3, p10TokPerSec: float64(n) / p10,
		}
		if cpuStep > 0 {
			row.cpuTokPerSec = float64(n) * float64(o.threads) / cpuStep
		}
		row.ofCeiling = row.tokPerSec / row.ceiling
		rows = append(rows, row)
	}
	for i := range rows {
		rows[i].ratio = rows[i].tokPerSec / rows[0].tokPerSec
		rows[i].p10Ratio = rows[i].p10TokPerSec / rows[0].p10TokPerSec
	}
	return rows, triad
}

// reportSweep prints the sweep: the fill, the ceiling's terms, one line per batch size.
func reportSweep(stdout io.Writer, u setup, fill sweepFill, rows []sweepRow, triad float64) error {
	o := u.o
	w := &reportWriter{w: stdout}
	maxB := o.batches[len(o.batches)-1]
	w.printf("fill        %d slots, one vision (grid %dx%d) and prefill (%d tokens) each: vision %s, prefill %s (medians; not in the sweep)\n",
		maxB, o.gridH, o.gridW, o.prompt, ms(fill.vision), ms(fill.prefill))
	w.printf("ceiling     B tokens per (%.3f GB weights + B x KV bytes per row) / triad %.1f GB/s (median of the triads before each run)\n",
		float64(decodeWeightBytes(u.m, o.quant))/1e9, triad)
	first := fmt.Sprintf("x B=%d", o.batches[0])
	w.printf("sweep       %5s %6s %9s %8s %7s %9s %9s %7s %8s %6s %9s %10s %9s\n",
		"B", "steps", "ms/step", "tok/s", first, "p10 ms", "p10 tok/s", first, "ceiling", "of it", "KV MB/row", "p10 GMAC/s", "cpu tok/s")
	for _, r := range rows {
		w.printf("sweep       %5d %6d %9.1f %8.2f %7.2f %9.1f %9.2f %7.2f %8.2f %5.0f%% %9.2f %10.1f %9.2f\n",
			r.batch, o.tokens*o.runs, r.stepMs, r.tokPerSec, r.ratio, r.p10Ms, r.p10TokPerSec, r.p10Ratio,
			r.ceiling, 100*r.ofCeiling, r.kvMBPerRow, r.gmacPerSec, r.cpuTokPerSec)
	}
	return w.err
}
