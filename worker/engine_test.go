package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/ttnn"
	"github.com/locateanything/detect/internal/syncbuf"
	"github.com/locateanything/detect/provision/extract"
)

// TestOpenEngineTTNNMatchesCPU opens the engine the way the worker does for LA_ENGINE=ttnn,
// with the numpy stand-in adapter in place of TT-NN: the first-boot LLM extraction runs into
// TT_DIT_CACHE_DIR, the bridge loads the adapter, and the answer must be the CPU engine's
// token for token.
func TestOpenEngineTTNNMatchesCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	adapters, err := filepath.Abs("../engine/ttnn")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	cfg := testEngineConfig(t)
	cfg.TTNN.Adapter, cfg.TTNN.Path, cfg.Extract.CacheDir = "la_ttnn_standin", adapters, cache
	cfg.TTNN.Precision, cfg.TTNN.Trace = "bfp8attn", false
	cfg.Weights.Dir = randomCheckpoint
	cfg.Threads, cfg.InTokenLimit, cfg.CanonGrid, cfg.MaxNewTokens = 2, 64, "8x10", 16
	var logged syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	img, err := os.ReadFile(testImages + "/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	run := func(backend string) *engine.Prediction {
		cfg.Engine.Backend = engine.BackendKind(backend)
		eng, err := OpenEngine(context.Background(), cfg, 0, log)
		if err != nil {
			t.Fatalf("open %s: %v", backend, err)
		}
		defer eng.Close()
		info := eng.Info()
		if want := map[string][2]string{"cpu": {"bf16 weights, f32 compute", "ar_greedy_trace"}, "ttnn": {"bfp8attn", "ar_greedy"}}[backend]; [2]string{info.Precision, info.DecodeMode} != want {
			t.Errorf("%s reports precision %q decode mode %q, want %q (LA_PREC, LA_TRACE)", backend, info.Precision, info.DecodeMode, want)
		}
		prep, err := eng.Prepare(context.Background(), engine.Request{Image: img, Query: "dog</c>bicycle"})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := eng.Generate(context.Background(), prep)
		if err != nil {
			t.Fatalf("%s: %v", backend, err)
		}
		return pred
	}
	cpu, ttnn := run("cpu"), run("ttnn")
	if !slices.Equal(cpu.Tokens, ttnn.Tokens) || cpu.RawText != ttnn.RawText {
		t.Fatalf("ttnn (stand-in) and cpu disagree:\n ttnn %v\n cpu  %v", ttnn.Tokens, cpu.Tokens)
	}
	if !extract.Complete(filepath.Join(cache, extract.DirName)) {
		t.Fatalf("LA_ENGINE=ttnn did not extract the LLM into %s", filepath.Join(cache, extract.DirName))
	}
	if !strings.Contains(logged.String(), "Loading weights: extracting the Qwen2.5 LLM") {
		t.Errorf("the first-boot extraction did not report through the worker's logger:\n%s", logged.String())
	}
	if ttnn.PrefillTokens != 128 || cpu.PrefillTokens != cpu.PromptTokens {
		t.Errorf("prefill_tokens: ttnn %d (want the device's padded 128), cpu %d (want the prompt's %d)",
			ttnn.PrefillTokens, cpu.PrefillTokens, cpu.PromptTokens)
	}
}

func TestOpenEngineRefusesUnknownBackend(t *testing.T) {
	cfg := testEngineConfig(t)
	cfg.Weights.Dir, cfg.Engine.Backend = randomCheckpoint, "gpu"
	_, err := OpenEngine(context.Background(), cfg, 0, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("LA_ENGINE=gpu opened")
	}
}

// TestTTNNWithoutChipSaysSoFirst: LA_ENGINE=ttnn with the real adapter on a host without a
// chip, and nothing else set (no TT_DIT_CACHE_DIR, no LA_LLM_DIR, no weights): the service
// and the engine's one constructor (`worker detect` and the other subcommands) both stop
// with one line saying no Blackhole device was found and where it looked, and write
// nothing: no LA_DATA_DIR, no unpacked bundled model.
func TestTTNNWithoutChipSaysSoFirst(t *testing.T) {
	if err := (ttnn.Config{}).CheckDevice(); err == nil {
		t.Skip("this host has a " + ttnn.DeviceDir + " node")
	}
	cfg := testEngineConfig(t)
	cfg.Engine.Backend = engine.BackendTTNN
	cfg.TTNN.Adapter, cfg.Extract.CacheDir, cfg.Extract.Dir = "la_ttnn_adapter", "", ""
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	bundled := filepath.Join(t.TempDir(), "bundled")
	want := "no Blackhole device found: no device node in " + ttnn.DeviceDir + "/"
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line starting %q", what, err, want)
		}
		for _, dir := range []string{cfg.DataDir, bundled} {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s wrote %s (stat: %v)", what, dir, err)
			}
		}
	}
	var landmarks syncbuf.Buffer
	err := Run(context.Background(), cfg, Options{Log: slog.New(slog.DiscardHandler), Landmarks: &landmarks, Open: OpenEngine})
	check("the service", err)
	if !strings.Contains(landmarks.String(), "Application startup failed") {
		t.Errorf("the service printed no startup-failed landmark: %q", landmarks.String())
	}
	_, err = Open(context.Background(), cfg, slog.New(slog.DiscardHandler), Setup{BundledDir: bundled})
	check("Open", err)
}
