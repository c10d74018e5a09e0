package pipeline

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// heldoutScene is one of tools/tinymodel/testdata/heldout.json's scenes.
type heldoutScene struct {
	File  string      `json:"file"`
	Task  string      `json:"task"`
	Query string      `json:"query"`
	Truth [][]float64 `json:"truth"` // boxes in the model's 0..1000 space
}

// BenchmarkHybridVsAR answers the 96 held-out scenes with the block-trained test model
// (tools/refmodel/testdata/hybrid/tiny-shapes-blocks), one request at a time, in AR and in
// hybrid mode on the CPU backend, and reports per image the device steps after the
// prefill, the generated tokens, the decode time and the device time (vision, prefill,
// decode), and over the run the true boxes found at IoU >= 0.5 and the false positives
// per query. ns/op is one pass over the 96 scenes (Generate only; Prepare runs before).
// The batch4 runs put the same scenes through the Batcher methods four at a time
// (continuous batching, as engine/chip does) and report the wall time and the device
// calls (Step, after the prefills) per image.
// The figures are in docs/hybrid-decoding.md, "Measured in the engine":
//
//	go test ./engine/pipeline -run '^$' -bench HybridVsAR -benchtime 1x -count 5
func BenchmarkHybridVsAR(b *testing.B) {
	raw, err := os.ReadFile("../../tools/tinymodel/testdata/heldout.json")
	if err != nil {
		b.Fatal(err)
	}
	var heldout struct {
		Scenes []heldoutScene `json:"scenes"`
	}
	if err := json.Unmarshal(raw, &heldout); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	o := OpenOptions{WeightsDir: blocksDir, Backend: "cpu", MaxSeqLen: 1024, MaxBatch: 1, InTokenLimit: 64,
		CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 48}
	p, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	o.MaxBatch = 4
	p4, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer p4.Close()
	for _, mode := range []engine.GenerationMode{engine.GenerationAR, engine.GenerationHybrid} {
		preps := make([]*engine.Prepared, len(heldout.Scenes))
		for i, s := range heldout.Scenes {
			img, err := os.ReadFile("../../tools/tinymodel/testdata/" + s.File)
			if err != nil {
				b.Fatal(err)
			}
			if preps[i], err = p.Prepare(context.Background(), engine.Request{Image: img, Query: s.Query,
				Task: engine.Task(s.Task), GenerationMode: mode}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(string(mode), func(b *testing.B) {
			var steps, tokens int
			var vision, prefill, decode, device time.Duration
			var tally shapes.Tally
			for range b.N {
				tally = shapes.Tally{}
				for i, prep := range preps {
					pred, err := p.Generate(context.Background(), prep)
					if err != nil {
						b.Fatal(err)
					}
					steps += pred.DecodeSteps
					tokens += pred.NumGeneratedTokens
					vision += msDuration(pred.TimingMS.Vision)
					prefill += msDuration(pred.TimingMS.Prefill)
					decode += msDuration(pred.TimingMS.Decode)
					device += msDuration(pred.TimingMS.Vision + pred.TimingMS.Prefill + pred.TimingMS.Decode)
					score(&tally, heldout.Scenes[i], pred)
				}
			}
			n := float64(b.N * len(preps))
			found, _, fp, _ := tally.Figures()
			b.ReportMetric(float64(steps)/n, "steps/image")
			b.ReportMetric(float64(tokens)/n, "tokens/image")
			b.ReportMetric(float64(vision.Microseconds())/1e3/n, "vision-ms/image")
			b.ReportMetric(float64(prefill.Microseconds())/1e3/n, "prefill-ms/image")
			b.ReportMetric(float64(decode.Microseconds())/1e3/n, "decode-ms/image")
			b.ReportMetric(float64(device.Microseconds())/1e3/n, "device-ms/image")
			b.ReportMetric(found, "found@0.5")
			b.ReportMetric(fp, "falsepos/query")
		})
		b.Run(string(mode)+"/batch4", func(b *testing.B) {
			calls := 0
			for range b.N {
				calls += batched(b, p4, preps)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N*len(preps)), "wall-ms/image")
			b.ReportMetric(float64(calls)/float64(b.N*len(preps)), "calls/image")
		})
	}
}

// batched answers preps through p's Batcher methods, as many at once as p has slots, and
// returns the number of Step calls.
func batched(b *testing.B, p *Pipeline, preps []*engine.Prepared) int {
	var seqs []*engine.Sequence
	next, calls := 0, 0
	finish := func(s *engine.Sequence) {
		if _, err := p.Finish(s); err != nil {
			b.Fatal(err)
		}
	}
	for next < len(preps) || len(seqs) > 0 {
		for len(seqs) < p.MaxBatch() && next < len(preps) {
			s, err := p.Start(preps[next])
			if err != nil {
				b.Fatal(err)
			}
			next++
			if s.Done {
				finish(s)
				continue
			}
			seqs = append(seqs, s)
		}
		if err := p.Step(seqs); err != nil {
			b.Fatal(err)
		}
		calls++
		live := seqs[:0]
		for _, s := range seqs {
			if s.Done {
				finish(s)
				continue
			}
			live = append(live, s)
		}
		seqs = live
	}
	return calls
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// score adds one answer to the tally, in the model's 0..1000 space.
func score(t *shapes.Tally, s heldoutScene, pred *engine.Prediction) {
	truth := make([][4]float64, len(s.Truth))
	for i, r := range s.Truth {
		truth[i] = [4]float64{r[0], r[1], r[2], r[3]}
	}
	if s.Task == string(engine.TaskPoint) {
		pts := make([][2]float64, len(pred.Points))
		for i, pt := range pred.Points {
			pts[i] = [2]float64{float64(pt.PointNorm[0]), float64(pt.PointNorm[1])}
		}
		t.AddPoints(truth, pts)
		return
	}
	boxes := make([][4]float64, len(pred.Detections))
	for i, d := range pred.Detections {
		boxes[i] = [4]float64{float64(d.BoxNorm[0]), float64(d.BoxNorm[1]), float64(d.BoxNorm[2]), float64(d.BoxNorm[3])}
	}
	t.Add(truth, boxes)
}
