package extract

import (
	"github.com/locateanything/detect/internal/flock"

	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/checkpoint"
)

const checkpointsDir = "../../testdata/checkpoints"

// snapshot lays out a committed tiny checkpoint the way the Hugging Face cache does
// (symlinked files) and adds the tokenizer_config.json (with an auto_map) and
// generation_config.json the real snapshot has.
func snapshot(t *testing.T, name string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join(checkpointsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeFile(t, filepath.Join(dir, "tokenizer_config.json"), `{
  "add_prefix_space": false,
  "auto_map": {"AutoTokenizer": ["tokenization_locateanything.LATokenizer", null]},
  "model_max_length": 32768,
  "tokenizer_class": "Qwen2Tokenizer"
}`)
	writeFile(t, filepath.Join(dir, "generation_config.json"), `{"eos_token_id": 151645, "do_sample": false}`)
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// storedTensor is one entry of a safetensors file as read back by readSafetensors.
type storedTensor struct {
	DType string
	Shape []int64
	Data  []byte
}

// readSafetensors parses a safetensors file independently of the writer.
func readSafetensors(t *testing.T, path string) map[string]storedTensor {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 8 {
		t.Fatalf("%s: %d bytes", path, len(raw))
	}
	n := binary.LittleEndian.Uint64(raw)
	if n%8 != 0 || 8+n > uint64(len(raw)) {
		t.Fatalf("%s: header length %d (file %d bytes)", path, n, len(raw))
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		t.Fatalf("%s: header: %v", path, err)
	}
	body := raw[8+n:]
	out := map[string]storedTensor{}
	var end int64
	for name, e := range header {
		if name == "__metadata__" {
			continue
		}
		var v struct {
			DType   string   `json:"dtype"`
			Shape   []int64  `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(e, &v); err != nil {
			t.Fatalf("%s: %s: %v", path, name, err)
		}
		if v.Offsets[0] < 0 || v.Offsets[1] < v.Offsets[0] || v.Offsets[1] > int64(len(body)) {
			t.Fatalf("%s: %s: offsets %v outside %d bytes", path, name, v.Offsets, len(body))
		}
		end = max(end, v.Offsets[1])
		out[name] = storedTensor{v.DType, v.Shape, body[v.Offsets[0]:v.Offsets[1]]}
	}
	if end != int64(len(body)) {
		t.Fatalf("%s: tensors end at %d, body is %d bytes", path, end, len(body))
	}
	return out
}

func TestExtractTinyCheckpoints(t *testing.T) {
	for _, name := range []string{"tiny-bf16", "tiny-f32"} {
		t.Run(name, func(t *testing.T) {
			snap := snapshot(t, name)
			cache := t.TempDir()
			res, err := LLM(context.Background(), snap, Options{CacheDir: cache})
			if err != nil {
				t.Fatal(err)
			}
			if res.Dir != filepath.Join(cache, DirName) || !res.Extracted {
				t.Fatalf("result %+v, want a fresh extraction into %s", res, filepath.Join(cache, DirName))
			}

			src, err := checkpoint.Open(snap)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			got := readSafetensors(t, filepath.Join(res.Dir, "model.safetensors"))
			want := 0
			var bytesWant int64
			for i := range src.Tensors {
				s := &src.Tensors[i]
				var newName string
				switch {
				case strings.HasPrefix(s.Name, "language_model.model."):
					newName = "model." + strings.TrimPrefix(s.Name, "language_model.model.")
				case s.Name == "language_model.lm_head.weight":
					newName = "lm_head.weight"
				default:
					continue
				}
				want++
				bytesWant += int64(len(s.Data))
				g, ok := got[newName]
				if !ok {
					t.Errorf("%s (from %s) missing", newName, s.Name)
					continue
				}
				if g.DType != s.DType.String() || !slices.Equal(g.Shape, s.Shape) || !bytes.Equal(g.Data, s.Data) {
					t.Errorf("%s: %s %v (%d bytes), source %s %v (%d bytes) differs", newName, g.DType, g.Shape, len(g.Data),
						s.DType, s.Shape, len(s.Data))
				}
			}
			if len(got) != want || res.Tensors != want || res.Bytes != bytesWant {
				t.Errorf("wrote %d tensors (result says %d, %d bytes), want %d (%d bytes)", len(got), res.Tensors, res.Bytes, want, bytesWant)
			}
			if _, ok := got["model.embed_tokens.weight"]; !ok {
				t.Error("no model.embed_tokens.weight")
			}
			_, head := got["lm_head.weight"]
			if head != src.HasLMHead() {
				t.Errorf("lm_head.weight written %v, snapshot has one %v", head, src.HasLMHead())
			}

			checkConfig(t, res.Dir, src.Config, head)
			for _, f := range []string{"vocab.json", "merges.txt", "added_tokens.json", "generation_config.json"} {
				a, _ := os.ReadFile(filepath.Join(snap, f))
				b, err := os.ReadFile(filepath.Join(res.Dir, f))
				if err != nil || !bytes.Equal(a, b) {
					t.Errorf("%s not copied unchanged (%v)", f, err)
				}
			}
			var tc map[string]any
			readJSON(t, filepath.Join(res.Dir, "tokenizer_config.json"), &tc)
			if _, ok := tc["auto_map"]; ok {
				t.Error("tokenizer_config.json still has auto_map")
			}
			if tc["tokenizer_class"] != "Qwen2Tokenizer" || tc["model_max_length"] != float64(32768) {
				t.Errorf("tokenizer_config.json lost fields: %v", tc)
			}
			noTempFiles(t, res.Dir)
		})
	}
}

func checkConfig(t *testing.T, dir string, src *checkpoint.Config, head bool) {
	t.Helper()
	var c struct {
		Architectures []string `json:"architectures"`
		ModelType     string   `json:"model_type"`
		Hidden        int      `json:"hidden_size"`
		Layers        int      `json:"num_hidden_layers"`
		Heads         int      `json:"num_attention_heads"`
		KVHeads       int      `json:"num_key_value_heads"`
		Intermediate  int      `json:"intermediate_size"`
		Vocab         int      `json:"vocab_size"`
		RopeTheta     float64  `json:"rope_theta"`
		RMSNormEps    float64  `json:"rms_norm_eps"`
		Tie           bool     `json:"tie_word_embeddings"`
		TorchDType    string   `json:"torch_dtype"`
		EOS           int      `json:"eos_token_id"`
	}
	readJSON(t, filepath.Join(dir, "config.json"), &c)
	s := src.Text
	if !slices.Equal(c.Architectures, []string{"Qwen2ForCausalLM"}) || c.ModelType != "qwen2" {
		t.Errorf("config.json: architectures %v, model_type %q", c.Architectures, c.ModelType)
	}
	if c.Hidden != s.Hidden || c.Layers != s.Layers || c.Heads != s.Heads || c.KVHeads != s.KVHeads ||
		c.Intermediate != s.Intermediate || c.Vocab != s.Vocab || c.RopeTheta != s.RopeTheta ||
		c.RMSNormEps != s.RMSNormEps || c.EOS != s.EOSTokenID || c.TorchDType == "" {
		t.Errorf("config.json %+v does not carry text_config %+v", c, s)
	}
	if head && c.Tie {
		t.Error("config.json ties the embeddings although lm_head.weight was written")
	}
	if !head && !c.Tie {
		t.Error("config.json unties the embeddings but no lm_head.weight was written")
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

func TestExtractReusesCompleteDirUnlessForced(t *testing.T) {
	snap := snapshot(t, "tiny-f32")
	dir := filepath.Join(t.TempDir(), "custom-llm")
	o := Options{Dir: dir}
	if _, err := LLM(context.Background(), snap, o); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "model.safetensors")
	first := inode(t, weights)

	res, err := LLM(context.Background(), snap, o)
	if err != nil || res.Extracted || res.Dir != dir {
		t.Fatalf("second run: %+v, %v; want the directory reused", res, err)
	}
	if inode(t, weights) != first {
		t.Fatal("second run rewrote model.safetensors")
	}

	o.Force = true
	res, err = LLM(context.Background(), snap, o)
	if err != nil || !res.Extracted {
		t.Fatalf("forced run: %+v, %v", res, err)
	}
	if inode(t, weights) == first {
		t.Fatal("forced run kept the old model.safetensors")
	}
	noTempFiles(t, dir)
}

func TestExtractCanceledLeavesNoWeights(t *testing.T) {
	snap := snapshot(t, "tiny-bf16")
	dir := filepath.Join(t.TempDir(), DirName)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := LLM(ctx, snap, Options{Dir: dir})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if Complete(dir) {
		t.Fatal("a canceled extraction looks complete")
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("model.safetensors after cancel: %v", err)
	}
	noTempFiles(t, dir)
	// The next boot extracts for real.
	if res, err := LLM(context.Background(), snap, Options{Dir: dir}); err != nil || !res.Extracted {
		t.Fatalf("after a canceled run: %+v, %v", res, err)
	}
}

func TestExtractWaitsForAnotherExtraction(t *testing.T) {
	snap := snapshot(t, "tiny-f32")
	dir := filepath.Join(t.TempDir(), DirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := flock.Lock(context.Background(), dir+".lock", lockPoll)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = LLM(ctx, snap, Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "waiting for another extraction") {
		t.Fatalf("error %v, want it to wait for the lock holder", err)
	}
}

func TestExtractErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := LLM(ctx, t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "neither TT_DIT_CACHE_DIR nor LA_LLM_DIR") {
		t.Errorf("no target: %v", err)
	}
	if _, err := LLM(ctx, filepath.Join(t.TempDir(), "absent"), Options{CacheDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "config.json") {
		t.Errorf("absent snapshot: %v", err)
	}
	snap := snapshot(t, "tiny-f32")
	if err := os.Remove(filepath.Join(snap, "merges.txt")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), DirName)
	if _, err := LLM(ctx, snap, Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "merges.txt") {
		t.Errorf("snapshot without merges.txt: %v", err)
	}
	if Complete(dir) {
		t.Error("a failed extraction looks complete")
	}
	if _, err := qwen2Config([]byte(`{"text_config": {"hidden_size": 8}}`), false, checkpoint.BF16); err == nil ||
		!strings.Contains(err.Error(), "num_hidden_layers") {
		t.Errorf("text_config without layers: %v", err)
	}
}
