package chip_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/locateanything/detect/engine"
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
	o := pipeline.OpenOptions{WeightsDir: dir, Backend: "cpu", Threads: 2, MaxSeqLen: 1024, InTokenLimit: 64,
		CanonGrid: "native", MaxNewTokens: 8, MaxNewTokensCap: 64}
	want := alone(t, o, reqs)
	o.MaxBatch = 4
	checkBatched(t, o, reqs, want)
}
