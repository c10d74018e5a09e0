package httpcompat

import (
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/sim"
)

// TestConcurrentPredictsBatchAndAnswerAsAlone sends /predict requests at once to a chip
// that decodes four together (the simulated p150a on the bundled model): each answer's
// text is the one the request gets alone, and the chip did batch them.
func TestConcurrentPredictsBatchAndAnswerAsAlone(t *testing.T) {
	open := func(maxBatch int) func() (engine.Engine, error) {
		return func() (engine.Engine, error) {
			return pipeline.Open(pipeline.OpenOptions{
				Settings:   engine.Settings{Backend: sim.Name, MaxSeqLen: 4096, MaxBatch: maxBatch, MaxNewTokens: 128, MaxNewTokensCap: 1024},
				WeightsDir: "../models/tiny-shapes",
				MaxPixels:  40_000_000,
				Sim: sim.Costs{Vision: 49 * time.Millisecond, Prefill: 58 * time.Millisecond,
					Decode: 23 * time.Millisecond, BatchAlpha: 0.1, Speed: 10},
			})
		}
	}
	var images []string
	for _, name := range []string{"dog.jpg", "kite.jpg", "person.jpg"} {
		data, err := os.ReadFile("../testdata/images/" + name)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, base64.StdEncoding.EncodeToString(data))
	}
	queries := []string{"dog", "kite</c>person", "red circle</c>dog", "person"}
	bodies := make([]map[string]any, 8)
	for i := range bodies {
		bodies[i] = map[string]any{"image": images[i%len(images)], "query": queries[i%len(queries)]}
	}

	answers := func(maxBatch int, parallel bool) (raw []string, batched int) {
		c, err := chip.Open(open(maxBatch))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ts := serveChip(t, c)
		raw = make([]string, len(bodies))
		var mu sync.Mutex
		send := func(i int) {
			status, body := postPredict(t, context.Background(), ts.URL, bodies[i])
			if status != http.StatusOK {
				t.Errorf("request %d: %d %s", i, status, body)
				return
			}
			mu.Lock()
			raw[i], _ = object(t, body)["raw_text"].(string)
			batched = max(batched, c.Running())
			mu.Unlock()
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() { // the largest batch the chip ran
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				mu.Lock()
				batched = max(batched, c.Running())
				mu.Unlock()
			}
		})
		var reqs sync.WaitGroup
		for i := range bodies {
			if parallel {
				reqs.Go(func() { send(i) })
			} else {
				send(i)
			}
		}
		reqs.Wait()
		close(stop)
		wg.Wait()
		return raw, batched
	}
	alone, _ := answers(1, false)
	together, batched := answers(4, true)
	for i := range bodies {
		if together[i] != alone[i] || alone[i] == "" {
			t.Errorf("request %d (%v) batched %q, alone %q", i, bodies[i]["query"], together[i], alone[i])
		}
	}
	if batched < 2 {
		t.Errorf("concurrent /predict requests were never decoded together (largest batch %d)", batched)
	}
}
