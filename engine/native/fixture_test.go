package native

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
)

// tinyCheckpoint describes a random checkpoint the tests write for themselves: the real
// nested config layout and the real vocabulary size, tiny widths.
type tinyCheckpoint struct {
	dtype   checkpoint.DType
	lmHead  bool
	posGrid [2]int // stored pos-emb grid (default 4x6)
}

func tinyConfig(posH, posW int) map[string]any {
	return map[string]any{
		"model_type":           "locateanything",
		"architectures":        []string{"LocateAnythingForConditionalGeneration"},
		"image_token_index":    151665,
		"box_start_token_id":   151668,
		"box_end_token_id":     151669,
		"ref_start_token_id":   151672,
		"ref_end_token_id":     151673,
		"coord_start_token_id": 151677,
		"coord_end_token_id":   152677,
		"none_token_id":        4064,
		"text_config": map[string]any{
			"model_type": "qwen2", "hidden_size": 32, "num_hidden_layers": 2,
			"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
			"vocab_size": 152681, "max_position_embeddings": 4096, "rope_theta": 1000000.0,
			"rms_norm_eps": 1e-6, "tie_word_embeddings": true, "eos_token_id": 151645,
			"bos_token_id": 151643,
		},
		"vision_config": map[string]any{
			"model_type": "moonvit", "hidden_size": 16, "num_hidden_layers": 2,
			"num_attention_heads": 2, "intermediate_size": 24, "patch_size": 14,
			"merge_kernel_size": []int{2, 2}, "init_pos_emb_height": posH, "init_pos_emb_width": posW,
		},
	}
}

// write puts the checkpoint into a fresh temporary directory and returns it.
func (tc tinyCheckpoint) write(t testing.TB) string {
	t.Helper()
	if tc.posGrid == [2]int{} {
		tc.posGrid = [2]int{4, 6}
	}
	dir := t.TempDir()
	writeJSONFile(t, filepath.Join(dir, checkpoint.ConfigFile), tinyConfig(tc.posGrid[0], tc.posGrid[1]))
	writeJSONFile(t, filepath.Join(dir, checkpoint.PreprocessorConfigFile), map[string]any{
		"image_mean": []float64{0.5, 0.5, 0.5}, "image_std": []float64{0.5, 0.5, 0.5},
		"in_token_limit": 1024, "patch_size": 14, "merge_kernel_size": []int{2, 2},
	})
	cfg, err := checkpoint.LoadConfig(dir)
	if err != nil {
		t.Fatalf("tiny config: %v", err)
	}
	specs := cfg.ExpectedTensors()
	if tc.lmHead {
		specs = append(specs, checkpoint.TensorSpec{Name: checkpoint.LMHeadName,
			Shape: []int64{int64(cfg.Text.Vocab), int64(cfg.Text.Hidden)}})
	}
	rng := rand.New(rand.NewPCG(7, 11))
	values := map[string][]float32{}
	shapes := map[string][]int64{}
	for _, s := range specs {
		n := int64(1)
		for _, d := range s.Shape {
			n *= d
		}
		v := make([]float32, n)
		scale := float32(0.5)
		if len(s.Shape) >= 2 {
			scale = float32(1 / math.Sqrt(float64(s.Shape[len(s.Shape)-1])))
		}
		isNorm := strings.Contains(s.Name, "norm") || strings.HasPrefix(s.Name, "mlp1.0")
		for i := range v {
			v[i] = scale * (2*rng.Float32() - 1)
			if isNorm && strings.HasSuffix(s.Name, "weight") {
				v[i] = 1 + 0.2*v[i]
			}
		}
		values[s.Name] = v
		shapes[s.Name] = s.Shape
	}
	writeSafetensors(t, filepath.Join(dir, checkpoint.SingleFile), values, shapes, tc.dtype)
	return dir
}

func writeJSONFile(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// bf16Bits rounds a float32 to bfloat16, nearest-even.
func bf16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

func writeSafetensors(t testing.TB, path string, values map[string][]float32, shapes map[string][]int64, dtype checkpoint.DType) {
	t.Helper()
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	var body []byte
	for _, n := range names {
		start := len(body)
		for _, f := range values[n] {
			switch dtype {
			case checkpoint.F32:
				body = binary.LittleEndian.AppendUint32(body, math.Float32bits(f))
			case checkpoint.BF16:
				body = binary.LittleEndian.AppendUint16(body, bf16Bits(f))
			default:
				t.Fatalf("fixture writes f32 or bf16, not %v", dtype)
			}
		}
		header[n] = map[string]any{"dtype": dtype.String(), "shape": shapes[n], "data_offsets": []int{start, len(body)}}
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), body...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// openModel opens a checkpoint directory and closes it when the test ends.
func openModel(t testing.TB, dir string) *checkpoint.Model {
	t.Helper()
	m, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatalf("open checkpoint %s: %v", dir, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// openBackend opens the CPU backend on m and closes it when the test ends. It must run on
// the goroutine that makes the backend's calls, locked to its OS thread (lockThread).
func openBackend(t testing.TB, m *checkpoint.Model, o Options) *Backend {
	t.Helper()
	b, err := Open("cpu", m, o)
	if err != nil {
		t.Fatalf("open cpu backend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// lockThread pins the test goroutine to its OS thread for the rest of the test, as
// engine/chip does for the service: backend calls must all come from one thread.
func lockThread(t testing.TB) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// testPatches makes deterministic patches in [-1, 1] for a grid.
func testPatches(gh, gw int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 3))
	p := make([]float32, gh*gw*3*14*14)
	for i := range p {
		p[i] = 2*rng.Float32() - 1
	}
	return p
}

// testPrompt is a chat-like prompt with n image tokens in the middle.
func testPrompt(nImage int) []int32 {
	ids := []int32{151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 151666}
	for range nImage {
		ids = append(ids, 151665)
	}
	return append(ids, 151667, 1975, 151645, 198, 151644, 77091, 198)
}

// prefill1 runs a prompt in slot 0, the way a request runs alone.
func prefill1(b *Backend, ids []int32) (int32, error) {
	tok, _, err := prefillStep(b, 0, ids)
	return tok, err
}

// decode1 runs one decode step of slot 0 alone.
func decode1(b *Backend, tok int32) (int32, error) {
	next := []int32{0}
	err := decodeStep(b, []int{0}, []int32{tok}, next, nil)
	return next[0], err
}
