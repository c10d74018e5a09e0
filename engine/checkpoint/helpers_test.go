package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// testConfig is a small config.json in the real nested layout, as a map a test can edit
// before writing it. Its vocabulary is tiny (token ids renumbered into it) so that the
// many checkpoints the tests write stay small.
func testConfig() map[string]any {
	return map[string]any{
		"model_type":           "locateanything",
		"architectures":        []string{"LocateAnythingForConditionalGeneration"},
		"image_token_index":    90,
		"box_start_token_id":   91,
		"box_end_token_id":     92,
		"ref_start_token_id":   93,
		"ref_end_token_id":     94,
		"coord_start_token_id": 95,
		"coord_end_token_id":   99,
		"none_token_id":        50,
		"text_config": map[string]any{
			"model_type":              "qwen2",
			"hidden_size":             8,
			"num_hidden_layers":       2,
			"num_attention_heads":     2,
			"num_key_value_heads":     1,
			"intermediate_size":       12,
			"vocab_size":              100,
			"max_position_embeddings": 4096,
			"rope_theta":              1000000.0,
			"rms_norm_eps":            1e-6,
			"tie_word_embeddings":     true,
			"eos_token_id":            89,
			"bos_token_id":            88,
		},
		"vision_config": map[string]any{
			"model_type":          "moonvit",
			"hidden_size":         8,
			"num_hidden_layers":   1,
			"num_attention_heads": 2,
			"intermediate_size":   16,
			"patch_size":          14,
			"merge_kernel_size":   []int{2, 2},
			"init_pos_emb_height": 4,
			"init_pos_emb_width":  6,
		},
	}
}

func testPreprocessorConfig() map[string]any {
	return map[string]any{
		"image_mean":        []float64{0.5, 0.5, 0.5},
		"image_std":         []float64{0.5, 0.5, 0.5},
		"in_token_limit":    1024,
		"patch_size":        14,
		"merge_kernel_size": []int{2, 2},
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rawTensor is a tensor to write: dtype spelled as in safetensors so tests can write
// types the reader refuses.
type rawTensor struct {
	dtype string
	shape []int64
	data  []byte
}

// encodeSafetensors lays out a safetensors file: length, JSON header padded to 8 bytes,
// then the tensors' data in name order.
func encodeSafetensors(t *testing.T, tensors map[string]rawTensor) []byte {
	t.Helper()
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var offset int64
	for _, n := range names {
		rt := tensors[n]
		header[n] = map[string]any{"dtype": rt.dtype, "shape": rt.shape, "data_offsets": []int64{offset, offset + int64(len(rt.data))}}
		offset += int64(len(rt.data))
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(out, h...)
	for _, n := range names {
		out = append(out, tensors[n].data...)
	}
	return out
}

// specTensors makes a zero-filled tensor of the given dtype for every spec.
func specTensors(specs []TensorSpec, dtype DType) map[string]rawTensor {
	out := map[string]rawTensor{}
	for _, s := range specs {
		n := int64(1)
		for _, d := range s.Shape {
			n *= d
		}
		out[s.Name] = rawTensor{dtype: dtype.String(), shape: s.Shape, data: make([]byte, n*int64(dtype.Size()))}
	}
	return out
}

// writeCheckpoint writes config files and, when shards > 1, splits the tensors
// round-robin into that many shards with an index; edit may change the tensors first.
func writeCheckpoint(t *testing.T, cfg, pp map[string]any, dtype DType, shards int, edit func(map[string]rawTensor)) string {
	t.Helper()
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, ConfigFile), cfg)
	writeJSON(t, filepath.Join(dir, PreprocessorConfigFile), pp)
	c, err := LoadConfig(dir)
	if err != nil {
		t.Fatalf("test config does not load: %v", err)
	}
	tensors := specTensors(c.ExpectedTensors(), dtype)
	if edit != nil {
		edit(tensors)
	}
	if shards <= 1 {
		writeFile(t, filepath.Join(dir, SingleFile), encodeSafetensors(t, tensors))
		return dir
	}
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]map[string]rawTensor, shards)
	weightMap := map[string]string{}
	for i, n := range names {
		k := i % shards
		if parts[k] == nil {
			parts[k] = map[string]rawTensor{}
		}
		parts[k][n] = tensors[n]
		weightMap[n] = shardName(k, shards)
	}
	for k, p := range parts {
		writeFile(t, filepath.Join(dir, shardName(k, shards)), encodeSafetensors(t, p))
	}
	writeJSON(t, filepath.Join(dir, IndexFile), map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	return dir
}

func shardName(k, n int) string {
	return "model-0000" + string(rune('1'+k)) + "-of-0000" + string(rune('0'+n)) + ".safetensors"
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// textConfigOf returns the nested text_config map of cfg for editing.
func textConfigOf(cfg map[string]any) map[string]any { return cfg["text_config"].(map[string]any) }

// visionConfigOf returns the nested vision_config map of cfg for editing.
func visionConfigOf(cfg map[string]any) map[string]any { return cfg["vision_config"].(map[string]any) }
