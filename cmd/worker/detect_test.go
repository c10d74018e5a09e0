package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/cli"
)

func TestDetectPrintsThePredictShapeWithTokens(t *testing.T) {
	overlay := filepath.Join(t.TempDir(), "out.png")
	var out bytes.Buffer
	err := runDetect([]string{
		"--weights", "../../testdata/checkpoints/tiny-bf16", "--image", "../../testdata/images/dog.jpg", "--query", "dog</c>bicycle",
		"--max-new-tokens", "6", "--in-token-limit", "64", "--overlay", overlay,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"query", "width", "height", "canonical_size", "grid_hw", "num_image_tokens",
		"prompt_tokens", "prefill_tokens", "raw_text", "detections", "points", "num_generated_tokens",
		"stopped_on_eos", "decode_mode", "timing_ms", "overlay_png_b64", "tokens"} {
		if _, ok := got[k]; !ok {
			t.Errorf("field %q missing", k)
		}
	}
	tokens, _ := got["tokens"].([]any)
	if n, _ := got["num_generated_tokens"].(float64); len(tokens) == 0 || int(n) != len(tokens) || len(tokens) > 6 {
		t.Errorf("tokens %v and num_generated_tokens %v disagree or exceed the budget of 6", tokens, got["num_generated_tokens"])
	}
	if got["width"] != 768.0 || got["height"] != 576.0 || got["query"] != "dog</c>bicycle" {
		t.Errorf("width %v height %v query %v", got["width"], got["height"], got["query"])
	}
	if strings.Contains(out.String(), `\u003c`) {
		t.Error("tags in the output are escaped")
	}
	if png, err := os.ReadFile(overlay); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("overlay: %v", err)
	}
}

// TestDetectOverlayFollowsTheFileName: --overlay x.jpg writes a JPEG, x.png a PNG, and a
// name that says neither is a usage error before any checkpoint is opened.
func TestDetectOverlayFollowsTheFileName(t *testing.T) {
	dir := t.TempDir()
	for name, magic := range map[string]string{"out.jpg": "\xff\xd8\xff", "out.JPEG": "\xff\xd8\xff", "out.png": "\x89PNG"} {
		path := filepath.Join(dir, name)
		err := runDetect([]string{
			"--weights", "../../testdata/checkpoints/tiny-bf16", "--image", "../../testdata/images/dog.jpg", "--query", "dog",
			"--max-new-tokens", "4", "--in-token-limit", "64", "--threads", "1", "--overlay", path,
		}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if pic, err := os.ReadFile(path); err != nil || !bytes.HasPrefix(pic, []byte(magic)) {
			t.Errorf("--overlay %s: %v, the file does not start with %q", name, err, magic)
		}
	}
	err := runDetect([]string{"--weights", "../../testdata/checkpoints/absent", "--image", "x.png", "--query", "x",
		"--overlay", filepath.Join(dir, "out.gif")}, &bytes.Buffer{})
	if !cli.IsUsage(err) || !strings.Contains(err.Error(), ".png, .jpg or .jpeg") {
		t.Errorf("--overlay out.gif: %v, want a usage error naming the formats", err)
	}
}

func TestDetectRefusesMissingArguments(t *testing.T) {
	if err := runDetect([]string{"--image", "../../testdata/images/dog.jpg"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--query") {
		t.Errorf("got %v, want an error naming --query", err)
	}
	err := runDetect([]string{"--weights", "../../testdata/checkpoints/tiny-bf16", "--image", "../../testdata/images/absent.jpg", "--query", "x"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "absent.jpg") {
		t.Errorf("got %v, want an error naming the missing image", err)
	}
}

// TestDetectRefusesAnUnknownGenerationMode: --generation-mode takes ar or hybrid; anything
// else is a usage error before a checkpoint is opened.
func TestDetectRefusesAnUnknownGenerationMode(t *testing.T) {
	err := runDetect([]string{"--weights", "../../testdata/checkpoints/absent", "--image", "x.png", "--query", "x",
		"--generation-mode", "fast"}, &bytes.Buffer{})
	if !cli.IsUsage(err) || !strings.Contains(err.Error(), "--generation-mode") || !strings.Contains(err.Error(), "ar, hybrid") {
		t.Errorf("got %v, want a usage error naming --generation-mode and ar, hybrid", err)
	}
}

// TestDetectInHybridMode: --generation-mode hybrid decodes in blocks (the block-trained
// test model writes a box per step): the answer says hybrid_greedy and its decode_steps,
// fewer than its tokens, with the generated ids still after the answer's keys.
func TestDetectInHybridMode(t *testing.T) {
	var out bytes.Buffer
	err := runDetect([]string{
		"--weights", "../../tools/refmodel/testdata/hybrid/tiny-shapes-blocks", "--image", "../../tools/tinymodel/testdata/heldout/05.png",
		"--query", "triangle", "--max-new-tokens", "48", "--threads", "1", "--generation-mode", "hybrid",
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		DecodeMode         string  `json:"decode_mode"`
		DecodeSteps        *int    `json:"decode_steps"`
		NumGeneratedTokens int     `json:"num_generated_tokens"`
		Tokens             []int32 `json:"tokens"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if got.DecodeMode != "hybrid_greedy" || got.DecodeSteps == nil || *got.DecodeSteps < 1 || *got.DecodeSteps >= got.NumGeneratedTokens-1 ||
		len(got.Tokens) != got.NumGeneratedTokens {
		t.Errorf("hybrid detect: %s in %v steps, %d tokens (%d ids); want hybrid_greedy in fewer steps than tokens\n%s",
			got.DecodeMode, got.DecodeSteps, got.NumGeneratedTokens, len(got.Tokens), out.String())
	}
}

// TestDetectRunsOnTheWorkersConfiguration: detect opens the engine the service opens,
// with the same variables: LA_ENGINE picks the engine, LA_MAX_SEQ_LEN bounds the
// sequence, and the answer names the model and engine that gave it.
func TestDetectRunsOnTheWorkersConfiguration(t *testing.T) {
	args := []string{"--weights", "../../testdata/checkpoints/tiny-bf16", "--image", "../../testdata/images/dog.jpg",
		"--query", "dog", "--max-new-tokens", "4", "--in-token-limit", "64", "--threads", "1"}
	for _, kind := range []engine.BackendKind{engine.BackendCPU, engine.BackendSim} {
		t.Run(string(kind), func(t *testing.T) {
			t.Setenv("LA_ENGINE", string(kind))
			t.Setenv("LA_SIM_SPEED", "1000")
			var out bytes.Buffer
			if err := runDetect(args, &out); err != nil {
				t.Fatal(err)
			}
			var got struct {
				AnsweredBy answeredBy `json:"answered_by"`
			}
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out.String())
			}
			abs, _ := filepath.Abs("../../testdata/checkpoints/tiny-bf16")
			if by := got.AnsweredBy; by.Engine != kind || by.Model != "tiny-bf16" || (by.WeightsDir != abs && by.WeightsDir != args[1]) {
				t.Errorf("answered by %+v, want model tiny-bf16 on engine %s from %s", by, kind, args[1])
			}
		})
	}
	t.Run("LA_MAX_SEQ_LEN", func(t *testing.T) {
		t.Setenv("LA_MAX_SEQ_LEN", "8") // far shorter than the prompt
		err := runDetect(args, &bytes.Buffer{})
		if err == nil {
			t.Fatal("detect ran a prompt longer than LA_MAX_SEQ_LEN 8")
		}
	})
	t.Run("invalid configuration", func(t *testing.T) {
		t.Setenv("LA_ENGINE", "sim")
		t.Setenv("LA_WEIGHTS_QUANT", "q8") // a cpu setting: the worker refuses it, so does detect
		if err := runDetect(args, &bytes.Buffer{}); !cli.IsUsage(err) || !strings.Contains(err.Error(), "LA_WEIGHTS_QUANT=q8") {
			t.Errorf("got %v, want the worker's configuration error", err)
		}
	})
}
