package chip_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/pipeline"
)

// Hybrid requests next to AR ones on one chip that batches them (one of them cancelled
// halfway): every answer equals the same request alone, so a hybrid sequence's block
// steps change nothing for the AR sequences decoded beside it, and the other way round.
func TestHybridNextToARThroughTheChip(t *testing.T) {
	const dir = "../../tools/refmodel/testdata/hybrid/tiny-shapes-blocks"
	raw, err := os.ReadFile("../../tools/tinymodel/testdata/heldout.json")
	if err != nil {
		t.Fatal(err)
	}
	var heldout struct {
		Scenes []struct {
			File  string `json:"file"`
			Task  string `json:"task"`
			Query string `json:"query"`
		} `json:"scenes"`
	}
	if err := json.Unmarshal(raw, &heldout); err != nil {
		t.Fatal(err)
	}
	var reqs []engine.Request
	for i, s := range heldout.Scenes[:12] {
		img, err := os.ReadFile("../../tools/tinymodel/testdata/" + s.File)
		if err != nil {
			t.Fatal(err)
		}
		mode := engine.GenerationHybrid
		if i%3 == 1 {
			mode = engine.GenerationAR
		}
		reqs = append(reqs, engine.Request{Image: img, Query: s.Query, Task: engine.Task(s.Task),
			MaxNewTokens: []int{48, 7, 30}[i%3], GenerationMode: mode})
	}
	o := pipeline.OpenOptions{Settings: engine.Settings{Backend: "cpu", Threads: 2, MaxSeqLen: 1024, InTokenLimit: 64, CanonGrid: "native", MaxNewTokens: 8, MaxNewTokensCap: 64}, WeightsDir: dir}
	want := alone(t, o, reqs)
	o.MaxBatch = 4
	checkBatched(t, o, reqs, want)
}

// The chip counts the tokens hybrid steps write (up to six a step per sequence), not one
// per sequence and step.
func TestChipCountsHybridTokens(t *testing.T) {
	const dir = "../../tools/refmodel/testdata/hybrid/tiny-shapes-blocks"
	o := pipeline.OpenOptions{Settings: engine.Settings{Backend: "cpu", Threads: 2, MaxSeqLen: 1024, InTokenLimit: 64, CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 64, MaxBatch: 2}, WeightsDir: dir}
	c, err := chip.Open(func() (engine.Engine, error) { return pipeline.Open(o) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	img, err := os.ReadFile("../../tools/tinymodel/testdata/heldout/00.png")
	if err != nil {
		t.Fatal(err)
	}
	total, steps := 0, 0
	for _, mode := range []engine.GenerationMode{engine.GenerationHybrid, engine.GenerationAR} {
		prep, err := c.Engine().Prepare(context.Background(), engine.Request{Image: img, Query: "purple shape", GenerationMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := c.Generate(context.Background(), chip.Interactive, prep)
		if err != nil {
			t.Fatal(err)
		}
		total += pred.NumGeneratedTokens
		if mode == engine.GenerationHybrid {
			steps = pred.DecodeSteps
		}
	}
	if got := c.GeneratedTokens(); got != uint64(total) || steps >= total {
		t.Errorf("the chip counted %d tokens, the answers hold %d (the hybrid one in %d steps)", got, total, steps)
	}
}
