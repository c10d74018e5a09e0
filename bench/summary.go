package bench

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
)

// summary is what the report prints about the runs: medians, rates and the decode
// figures against the bandwidth ceilings.
type summary struct {
	vision, prefill, decode time.Duration // medians over the runs
	visionGF, prefillGF     float64       // GFLOP/s at the median times
	tokPerSec               float64       // decode, at the median time
	bytesPerToken           float64       // weight bytes one decode step reads
	decodeGBps              float64       // weight bytes read per second in decode
	ceiling                 float64       // tokens/s that the first triad allows

	// decode/run: each run against the triad measured just before it
	runTriad                        float64 // median of those triads
	ratioMin, ratioMedian, ratioMax float64 // tokens/s over that run's ceiling

	cpuPerToken time.Duration // decode/cpu: median process CPU time per token
	fastStep    time.Duration // decode/p10: 10th-percentile step over all runs
	bestTriad   float64       // the best triad measured, for decode/p10 and decode/cpu

	mem memory // the process's resident memory after the runs
}

// summarise reduces the runs to medians and rates. On a shared machine a long decode
// does not get the bandwidth a short STREAM burst gets, so besides the medians it keeps
// three views of decode: per run against its own triad, CPU time per token, and the
// quiet moments (the 10th-percentile step against the best triad).
func summarise(m *checkpoint.Model, o options, sh shapes, mf machineFigures, runs []stageTimes) summary {
	c := m.Config
	s := summary{
		vision:        median(runs, func(s stageTimes) time.Duration { return s.vision }),
		prefill:       median(runs, func(s stageTimes) time.Duration { return s.prefill }),
		decode:        median(runs, func(s stageTimes) time.Duration { return s.decode }),
		bytesPerToken: float64(decodeWeightBytes(m, o.quant)),
		mem:           readMemory(),
	}
	s.visionGF = visionFLOPs(m, sh.patches) / s.vision.Seconds() / 1e9
	s.prefillGF = prefillFLOPs(c, o.prompt) / s.prefill.Seconds() / 1e9
	s.tokPerSec = float64(o.tokens) / s.decode.Seconds()
	s.decodeGBps = s.bytesPerToken * s.tokPerSec / 1e9
	s.ceiling = mf.triadGBps * 1e9 / s.bytesPerToken

	ratios := make([]float64, len(runs))
	triads := make([]float64, len(runs))
	var steps []time.Duration
	for i, r := range runs {
		ratios[i] = float64(o.tokens) / r.decode.Seconds() * s.bytesPerToken / (r.triadGBps * 1e9)
		triads[i] = r.triadGBps
		steps = append(steps, r.steps...)
	}
	slices.Sort(ratios)
	slices.Sort(triads)
	slices.Sort(steps)
	s.ratioMin, s.ratioMedian, s.ratioMax = ratios[0], ratios[len(ratios)/2], ratios[len(ratios)-1]
	s.runTriad = triads[len(triads)/2]
	s.bestTriad = max(mf.triadGBps, triads[len(triads)-1])
	s.fastStep = steps[len(steps)/10]
	s.cpuPerToken = median(runs, func(s stageTimes) time.Duration { return s.decodeCPU }) / time.Duration(o.tokens)
	return s
}

// median is the median of one figure over the runs (the mean of the middle two for an
// even count).
func median(runs []stageTimes, f func(stageTimes) time.Duration) time.Duration {
	d := make([]time.Duration, len(runs))
	for i, r := range runs {
		d[i] = f(r)
	}
	slices.Sort(d)
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

// visionFLOPs counts the multiply-adds (x2) of the vision tower, merge and projector on
// L patches: the matrix products and the attention, not the norms and activations.
func visionFLOPs(m *checkpoint.Model, L int) float64 {
	v, t := m.Config.Vision, m.Config.Text
	C, I, l := float64(v.Hidden), float64(v.Intermediate), float64(L)
	f := 2 * l * float64(3*v.PatchSize*v.PatchSize) * C
	perLayer := 2*l*C*3*C + 2*l*C*C + 2*2*l*C*I + 2*2*l*l*C
	f += float64(v.Layers) * perLayer
	mid := float64(t.Hidden)
	if p, ok := m.Tensor("mlp1.1.weight"); ok && len(p.Shape) == 2 {
		mid = float64(p.Shape[0])
	}
	tokens, merged := l/float64(v.MergeKernel*v.MergeKernel), C*float64(v.MergeKernel*v.MergeKernel)
	return f + 2*tokens*merged*mid + 2*tokens*mid*float64(t.Hidden)
}

// prefillFLOPs counts the decoder's matrix products over n tokens, causal attention and
// the LM head for the last position.
func prefillFLOPs(c *checkpoint.Config, n int) float64 {
	t := c.Text
	D, I, N := float64(t.Hidden), float64(t.Intermediate), float64(n)
	qd, kvd := float64(t.Heads*t.HeadDim), float64(t.KVHeads*t.HeadDim)
	perLayer := 2*N*D*(qd+2*kvd) + 2*N*qd*D + 3*2*N*D*I + 2*2*qd*N*(N+1)/2
	return float64(t.Layers)*perLayer + 2*float64(t.Vocab)*D
}

// decodeWeightBytes is what one decode step reads from the weights: every decoder
// matrix and the LM head (or the tied embeddings), in quant's format: the checkpoint's, or
// for q8 9/8 bytes a weight for every matrix whose rows are whole blocks of 32.
func decodeWeightBytes(m *checkpoint.Model, quant engine.WeightsQuant) int64 {
	var n int64
	size := func(t *checkpoint.Tensor) int64 {
		if quant == engine.WeightsQ8 && len(t.Shape) == 2 && t.Shape[1]%32 == 0 {
			return t.Elements() * 9 / 8
		}
		return int64(len(t.Data))
	}
	for _, t := range m.Tensors {
		if strings.HasPrefix(t.Name, "language_model.model.layers.") {
			n += size(&t)
		}
	}
	head := "language_model.model.embed_tokens.weight"
	if m.HasLMHead() {
		head = checkpoint.LMHeadName
	}
	if t, ok := m.Tensor(head); ok {
		n += size(t)
	}
	return n
}

// memory is the process's resident set from /proc/self/status, in bytes (zero where it
// can not be read): VmRSS split into RssAnon (the resident weight copy, caches, buffers)
// and RssFile (mapped checkpoint pages), and VmHWM, the peak.
type memory struct {
	rss, anon, file, peak float64
}

func readMemory() memory {
	var m memory
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var kb float64
		if _, err := fmt.Sscanf(strings.TrimSpace(value), "%f kB", &kb); err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			m.rss = kb * 1024
		case "RssAnon":
			m.anon = kb * 1024
		case "RssFile":
			m.file = kb * 1024
		case "VmHWM":
			m.peak = kb * 1024
		}
	}
	return m
}
