package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

// TestGenerationModeDefaultReachesTheEngine: LA_GENERATION_MODE=hybrid, read from the
// environment as the worker reads it, is how the engine decodes what names no mode: a
// queued job and a /predict without generation_mode both answer in hybrid mode (the same
// answer in the same steps), /info says hybrid is the default, and a job or request that
// names ar still gets one token per step.
func TestGenerationModeDefaultReachesTheEngine(t *testing.T) {
	t.Setenv("LA_GENERATION_MODE", "hybrid")
	dataDir := t.TempDir()
	cfg := singleMachineConfig(t, dataDir, freeport.MustAddr(t))
	weights, err := filepath.Abs("../tools/refmodel/testdata/hybrid/tiny-shapes-blocks")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Weights.Dir, cfg.Threads, cfg.MaxSeqLen, cfg.MaxNewTokens = weights, 1, 1024, 24
	cfg.HTTP.Addr = freeport.MustAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Open: OpenEngine})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	base := "http://" + cfg.HTTP.Addr
	waitHealthy(t, base)

	js := publisher(t, cfg.Embedded.Listen)
	img, err := filepath.Abs(testImages + "/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	for id, mode := range map[string]engine.GenerationMode{"by-default": "", "named-ar": engine.GenerationAR} {
		b, _ := json.Marshal(jobs.Job{ID: id, Image: "file://" + img, Query: "dog", GenerationMode: mode})
		if _, err := js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	results := map[string]jobs.Result{}
	for _, id := range []string{"by-default", "named-ar"} {
		testwait.Until(t, time.Minute, "the result of "+id, func() bool {
			var ok bool
			results[id], ok = readResult(t, dataDir, id)
			return ok
		})
	}
	hy, ar := results["by-default"], results["named-ar"]
	if hy.Status != jobs.StatusSucceeded || hy.GenerationMode != engine.GenerationHybrid || hy.DecodeMode != "hybrid_greedy" || hy.DecodeSteps < 1 {
		t.Errorf("a job naming no mode: %s %s %s in %d steps (%+v); want hybrid, the worker's default", hy.Status, hy.GenerationMode, hy.DecodeMode, hy.DecodeSteps, hy.Error)
	}
	if ar.Status != jobs.StatusSucceeded || ar.GenerationMode != engine.GenerationAR || ar.DecodeMode != "ar_greedy_trace" || ar.DecodeSteps != ar.NumGeneratedTokens-1 {
		t.Errorf("a job naming ar: %s %s %s in %d steps for %d tokens (%+v)", ar.Status, ar.GenerationMode, ar.DecodeMode, ar.DecodeSteps, ar.NumGeneratedTokens, ar.Error)
	}

	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"image": base64.StdEncoding.EncodeToString(raw), "query": "dog"})
	resp, err := http.Post(base+"/predict", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var pred struct {
		RawText     string `json:"raw_text"`
		DecodeMode  string `json:"decode_mode"`
		DecodeSteps *int   `json:"decode_steps"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pred); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/predict: %d %v", resp.StatusCode, err)
	}
	if pred.DecodeMode != "hybrid_greedy" || pred.DecodeSteps == nil || *pred.DecodeSteps != hy.DecodeSteps || pred.RawText != hy.RawText {
		t.Errorf("/predict naming no mode: %s, steps %v, %q; want the hybrid job's answer %q in %d steps",
			pred.DecodeMode, pred.DecodeSteps, pred.RawText, hy.RawText, hy.DecodeSteps)
	}

	resp, err = http.Get(base + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		GenerationMode string `json:"generation_mode"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || info.GenerationMode != "hybrid" {
		t.Errorf("/info generation_mode %q (%v), want hybrid", info.GenerationMode, err)
	}
}
