package httpcompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/prompt"
	"github.com/locateanything/detect/engine/sim"
)

// TestPredictAdditionsOnTheBundledModel: /predict on the real engine (the bundled model on
// the CPU backend) writes the engine's score on every detection, and warnings about a
// query that runs as written, as an addition that is absent when there is nothing to say.
func TestPredictAdditionsOnTheBundledModel(t *testing.T) {
	c, err := chip.Open(func() (engine.Engine, error) {
		return pipeline.Open(pipeline.OpenOptions{
			Settings:   engine.Settings{Backend: "cpu", Threads: 1, MaxSeqLen: 512, MaxBatch: 1, CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 48},
			WeightsDir: "../models/tiny-shapes",
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts := serveChip(t, c)
	img, err := os.ReadFile("../tools/tinymodel/testdata/heldout/05.png")
	if err != nil {
		t.Fatal(err)
	}

	for _, q := range []struct {
		query string
		warn  bool
	}{{"triangle", false}, {"triangle, circle", true}, {"triangle</c>", true}} {
		prep, err := c.Engine().Prepare(t.Context(), engine.Request{Image: img, Query: q.query})
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.Generate(t.Context(), chip.Interactive, prep)
		if err != nil {
			t.Fatal(err)
		}
		status, body := postPredict(t, t.Context(), ts.URL, map[string]any{"image": base64.StdEncoding.EncodeToString(img), "query": q.query})
		if status != http.StatusOK {
			t.Fatalf("%q: %d %s", q.query, status, body)
		}
		var got struct {
			Detections []struct {
				Score json.Number `json:"score"`
			} `json:"detections"`
			Warnings *[]string `json:"warnings"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Detections) == 0 || len(got.Detections) != len(want.Detections) {
			t.Fatalf("%q: %d detections, the engine gives %d: %s", q.query, len(got.Detections), len(want.Detections), body)
		}
		for i, d := range got.Detections {
			if v, err := d.Score.Float64(); err != nil || v != want.Detections[i].Score || v <= 0 || v > 1 {
				t.Errorf("%q: detection %d score %s, the engine's %v", q.query, i, d.Score, want.Detections[i].Score)
			}
		}
		switch {
		case !q.warn && (got.Warnings != nil || bytes.Contains(body, []byte(`"warnings"`))):
			t.Errorf("%q: warnings in %s, want the key absent", q.query, body)
		case q.warn && (got.Warnings == nil || len(*got.Warnings) != 1 || !strings.Contains((*got.Warnings)[0], q.query)):
			t.Errorf("%q: warnings %v, want one about the query", q.query, got.Warnings)
		}
	}
}

// TestPredictWarningsAreBounded: a query of 250 </c> answered 251 warnings, each quoting
// the whole query (#23, defect 10); the answer, from the simulated chip on the bundled
// model, now has a few short ones.
func TestPredictWarningsAreBounded(t *testing.T) {
	c, err := chip.Open(func() (engine.Engine, error) {
		return pipeline.Open(pipeline.OpenOptions{
			Settings:   engine.Settings{Backend: sim.Name, MaxSeqLen: 4096, MaxBatch: 1, MaxNewTokens: 128, MaxNewTokensCap: 1024},
			WeightsDir: "../models/tiny-shapes",
			MaxPixels:  40_000_000,
			Sim:        sim.Costs{Vision: time.Millisecond, Prefill: time.Millisecond, Decode: time.Millisecond, Speed: 10},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts := serveChip(t, c)
	status, body := postPredict(t, t.Context(), ts.URL, map[string]any{"image": dogB64(t), "query": strings.Repeat("</c>", 250)})
	if status != http.StatusOK {
		t.Fatalf("status %d: %.300s", status, body)
	}
	var got struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, w := range got.Warnings {
		size += len(w)
	}
	if len(got.Warnings) == 0 || len(got.Warnings) > prompt.MaxWarnings || size > 2000 {
		t.Errorf("%d warnings of %d bytes in all, want 1..%d short ones: %.300s", len(got.Warnings), size, prompt.MaxWarnings, body)
	}
}
