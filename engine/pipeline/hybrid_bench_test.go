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

// BenchmarkHybridVsAR answers the 96 held-out scenes with the bundled model
// (models/tiny-shapes, sub-benchmark "bundled") and with the block-trained test model
// (tools/refmodel/testdata/hybrid/tiny-shapes-blocks, "blocks") on the CPU backend, one request at a
// time, each scene in AR and then in hybrid mode, and reports per image and mode the
// device steps after the prefill, the generated tokens and the stage times, and over the
// run the true boxes found at IoU >= 0.5 and the false positives per query. ns/op is one
// pass over the 96 scenes in both modes (Generate only; Prepare runs before).
// The batch4 runs put the same scenes through the Batcher methods four at a time
// (continuous batching, as engine/chip does) and report the wall time and the device
// calls (Step, after the prefills) per image.
// The figures are in docs/hybrid-decoding.md, "Measured in the engine":
//
//	go test ./engine/pipeline -run '^$' -bench HybridVsAR -benchtime 1x -count 5
func BenchmarkHybridVsAR(b *testing.B) {
	b.Run("bundled", func(b *testing.B) { benchHybridVsAR(b, "../../models/tiny-shapes") })
	b.Run("blocks", func(b *testing.B) { benchHybridVsAR(b, blocksDir) })
}

func benchHybridVsAR(b *testing.B, dir string) {
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
	o := OpenOptions{Settings: engine.Settings{Backend: "cpu", MaxSeqLen: 1024, MaxBatch: 1, InTokenLimit: 64, CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 48}, WeightsDir: dir}
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
	modes := []engine.GenerationMode{engine.GenerationAR, engine.GenerationHybrid}
	preps := map[engine.GenerationMode][]*engine.Prepared{}
	for _, mode := range modes {
		for _, s := range heldout.Scenes {
			img, err := os.ReadFile("../../tools/tinymodel/testdata/" + s.File)
			if err != nil {
				b.Fatal(err)
			}
			prep, err := p.Prepare(context.Background(), engine.Request{Image: img, Query: s.Query,
				Task: engine.Task(s.Task), GenerationMode: mode})
			if err != nil {
				b.Fatal(err)
			}
			preps[mode] = append(preps[mode], prep)
		}
	}
	// Alone: each scene in AR and then in hybrid mode, so both modes see the same load on a
	// shared machine.
	b.Run("alone", func(b *testing.B) {
		type totals struct {
			steps, tokens                   int
			vision, prefill, decode, device time.Duration
			tally                           shapes.Tally
		}
		var t [2]totals
		for range b.N {
			for m := range t {
				t[m].tally = shapes.Tally{}
			}
			for i := range heldout.Scenes {
				for m, mode := range modes {
					pred, err := p.Generate(context.Background(), preps[mode][i])
					if err != nil {
						b.Fatal(err)
					}
					t[m].steps += pred.DecodeSteps
					t[m].tokens += pred.NumGeneratedTokens
					t[m].vision += msDuration(pred.TimingMS.Vision)
					t[m].prefill += msDuration(pred.TimingMS.Prefill)
					t[m].decode += msDuration(pred.TimingMS.Decode)
					score(&t[m].tally, heldout.Scenes[i], pred)
				}
			}
		}
		n := float64(b.N * len(heldout.Scenes))
		for m, mode := range modes {
			found, _, fp, _ := t[m].tally.Figures()
			b.ReportMetric(float64(t[m].steps)/n, string(mode)+"-steps/image")
			b.ReportMetric(float64(t[m].tokens)/n, string(mode)+"-tokens/image")
			b.ReportMetric(float64(t[m].vision.Microseconds())/1e3/n, string(mode)+"-vision-ms/image")
			b.ReportMetric(float64(t[m].prefill.Microseconds())/1e3/n, string(mode)+"-prefill-ms/image")
			b.ReportMetric(float64(t[m].decode.Microseconds())/1e3/n, string(mode)+"-decode-ms/image")
			b.ReportMetric(found, string(mode)+"-found@0.5")
			b.ReportMetric(fp, string(mode)+"-falsepos/query")
		}
	})
	for _, mode := range modes {
		b.Run(string(mode)+"/batch4", func(b *testing.B) {
			calls := 0
			for range b.N {
				calls += batched(b, p4, preps[mode])
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N*len(preps[mode])), "wall-ms/image")
			b.ReportMetric(float64(calls)/float64(b.N*len(preps[mode])), "calls/image")
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
