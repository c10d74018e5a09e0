package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/jpeg"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/syncbuf"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

// TestWorkerEndToEndOnTheCPUEngine runs the real worker wiring with the real engine (the C
// backend on the small bundled checkpoint): a queued job and a /predict request for the
// same image and query must give the same answer, the job's result and overlay must be
// stored and published, and the launcher's landmark must be printed once.
func TestWorkerEndToEndOnTheCPUEngine(t *testing.T) {
	dataDir := t.TempDir()
	cfg := singleMachineConfig(t, dataDir, freeport.MustAddr(t))
	weightsDir, err := filepath.Abs(randomCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Weights.Dir = weightsDir
	cfg.InTokenLimit = 64 // small images keep the test quick
	cfg.MaxNewTokens = 12
	cfg.HTTP.Addr = freeport.MustAddr(t)
	landmarks := &syncbuf.Buffer{}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- Run(ctx, cfg, Options{Log: log, Landmarks: landmarks, Open: OpenEngine}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	base := "http://" + cfg.HTTP.Addr
	waitHealthy(t, base)
	if n := strings.Count(landmarks.String(), "Application startup complete"); n != 1 {
		t.Fatalf("startup landmark printed %d times: %q", n, landmarks.String())
	}

	// The queued path.
	js := publisher(t, cfg.Embedded.Listen)
	results, err := js.OrderedConsumer(t.Context(), jobs.ResultsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := filepath.Abs(testImages + "/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	job, _ := json.Marshal(jobs.Job{ID: "e2e-dog", Image: "file://" + img, Query: "dog</c>bicycle", Overlay: true})
	if _, err := js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), job, jetstream.WithMsgID("e2e-dog")); err != nil {
		t.Fatal(err)
	}
	msg, err := results.Next(jetstream.FetchMaxWait(2 * time.Minute))
	if err != nil {
		t.Fatalf("no result published: %v", err)
	}
	var published jobs.Result
	if err := json.Unmarshal(msg.Data(), &published); err != nil {
		t.Fatal(err)
	}
	stored, ok := readResult(t, dataDir, "e2e-dog")
	if !ok {
		t.Fatal("result published but not stored")
	}
	if published.Status != jobs.StatusSucceeded || stored.Status != jobs.StatusSucceeded {
		t.Fatalf("status published %s stored %s (error %+v)", published.Status, stored.Status, stored.Error)
	}
	if stored.NumGeneratedTokens < 1 || stored.NumGeneratedTokens > 12 || stored.Width != 768 || stored.Height != 576 {
		t.Fatalf("stored result does not describe the run: %+v", stored.Answer)
	}
	if stored.OverlayURL == nil {
		t.Fatal("overlay requested but no overlay URL in the result")
	}
	// A result names the checkpoint that answered and carries no field of the /predict
	// contract that only /predict fills.
	rawResult, err := os.ReadFile(filepath.Join(dataDir, "results", "e2e-dog.json"))
	if err != nil {
		t.Fatal(err)
	}
	if stored.Model != "tiny-bf16" || bytes.Contains(rawResult, []byte("overlay_png_b64")) || bytes.Contains(rawResult, []byte(`"simulated"`)) {
		t.Fatalf("stored result names model %q (want tiny-bf16), carries overlay_png_b64 or says a real answer is simulated:\n%s", stored.Model, rawResult)
	}
	png, err := os.ReadFile(strings.TrimPrefix(*stored.OverlayURL, "file://"))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("overlay at %s: %v", *stored.OverlayURL, err)
	}

	// The synchronous path, same image and query: the same model run, so the same answer.
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"image": base64.StdEncoding.EncodeToString(raw), "query": "dog</c>bicycle", "return_overlay": true})
	resp, err := http.Post(base+"/predict", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/predict answered %d: %s", resp.StatusCode, b)
	}
	var pred struct {
		RawText            string `json:"raw_text"`
		NumGeneratedTokens int    `json:"num_generated_tokens"`
		GridHW             [2]int `json:"grid_hw"`
		OverlayPNG         []byte `json:"overlay_png_b64"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pred); err != nil {
		t.Fatal(err)
	}
	if pred.RawText != stored.RawText || pred.NumGeneratedTokens != stored.NumGeneratedTokens || pred.GridHW != stored.GridHW {
		t.Fatalf("/predict and the queued job disagree:\n predict %+v\n job     raw=%q n=%d grid=%v",
			pred, stored.RawText, stored.NumGeneratedTokens, stored.GridHW)
	}
	// The job draws its overlay itself (jobs.drawOverlay), /predict through the engine:
	// the same answer gives the same picture, byte for byte.
	if !bytes.Equal(pred.OverlayPNG, png) {
		t.Fatalf("/predict's overlay (%d bytes) differs from the job's PNG (%d bytes)", len(pred.OverlayPNG), len(png))
	}

	// The same job with a JPEG overlay: <id>.jpg next to the result, the image's size.
	job, _ = json.Marshal(jobs.Job{ID: "e2e-dog-jpeg", Image: "file://" + img, Query: "dog</c>bicycle", Overlay: true, OverlayFormat: overlay.JPEG})
	if _, err := js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), job, jetstream.WithMsgID("e2e-dog-jpeg")); err != nil {
		t.Fatal(err)
	}
	if _, err := results.Next(jetstream.FetchMaxWait(2 * time.Minute)); err != nil {
		t.Fatalf("no result published: %v", err)
	}
	stored, ok = readResult(t, dataDir, "e2e-dog-jpeg")
	if !ok || stored.Status != jobs.StatusSucceeded || stored.OverlayURL == nil || stored.OverlayFormat != overlay.JPEG {
		t.Fatalf("JPEG job: stored %v, %+v", ok, stored)
	}
	if want := "file://" + filepath.Join(dataDir, "results", "e2e-dog-jpeg.jpg"); *stored.OverlayURL != want {
		t.Fatalf("JPEG overlay at %s, want %s", *stored.OverlayURL, want)
	}
	pic, err := os.ReadFile(strings.TrimPrefix(*stored.OverlayURL, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(pic)); err != nil || cfg.Width != 768 || cfg.Height != 576 {
		t.Fatalf("JPEG overlay: %dx%d, %v; want a 768x576 JPEG", cfg.Width, cfg.Height, err)
	}
}

// waitHealthy polls /health until it says ok.
func waitHealthy(t *testing.T, base string) {
	t.Helper()
	testwait.Until(t, 2*time.Minute, "/health to say ok", func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var h struct{ Status string }
		_ = json.NewDecoder(resp.Body).Decode(&h)
		return h.Status == "ok"
	})
}
