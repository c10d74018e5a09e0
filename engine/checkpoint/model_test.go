package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOpenSingleFile(t *testing.T) {
	cfg, pp := testConfig(), testPreprocessorConfig()
	dir := writeCheckpoint(t, cfg, pp, F32, 1, func(ts map[string]rawTensor) {
		// A recognisable value to read back through the mapping.
		b := ts["language_model.model.norm.weight"]
		binary.LittleEndian.PutUint32(b.data[4:], math.Float32bits(1.5))
	})
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	specs := m.Config.ExpectedTensors()
	if len(m.Tensors) != len(specs) {
		t.Errorf("%d tensors, want %d", len(m.Tensors), len(specs))
	}
	if !slices.IsSortedFunc(m.Tensors, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("tensors are not sorted by name")
	}
	if m.HasLMHead() {
		t.Error("HasLMHead without an lm_head tensor")
	}
	norm, ok := m.Tensor("language_model.model.norm.weight")
	if !ok {
		t.Fatal("norm weight not found")
	}
	if norm.DType != F32 || !slices.Equal(norm.Shape, []int64{8}) || len(norm.Data) != 32 {
		t.Errorf("norm: %v %v %d bytes", norm.DType, norm.Shape, len(norm.Data))
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(norm.Data[4:])); got != 1.5 {
		t.Errorf("norm[1] = %v, want 1.5", got)
	}
	if _, ok := m.Tensor("no.such.tensor"); ok {
		t.Error("found a tensor that does not exist")
	}
	if len(m.Extra()) != 0 {
		t.Errorf("extra tensors %v", m.Extra())
	}
	if err := m.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestOpenShardedWithLMHeadAndExtras(t *testing.T) {
	cfg, pp := testConfig(), testPreprocessorConfig()
	dir := writeCheckpoint(t, cfg, pp, BF16, 2, func(ts map[string]rawTensor) {
		ts[LMHeadName] = rawTensor{dtype: "BF16", shape: []int64{100, 8}, data: make([]byte, 100*8*2)}
		ts["vision_model.rotary.inv_freq"] = rawTensor{dtype: "F32", shape: []int64{2}, data: make([]byte, 8)}
	})
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.HasLMHead() {
		t.Error("HasLMHead = false with an lm_head tensor")
	}
	if got := m.Extra(); !slices.Equal(got, []string{"vision_model.rotary.inv_freq"}) {
		t.Errorf("Extra() = %v", got)
	}
	if len(m.files) != 2 {
		t.Errorf("mapped %d files, want 2", len(m.files))
	}
	emb, _ := m.Tensor("language_model.model.embed_tokens.weight")
	if emb.DType != BF16 || emb.Elements() != 100*8 {
		t.Errorf("embed: %v %d elements", emb.DType, emb.Elements())
	}
}

func TestOpenRejectsBadCheckpoints(t *testing.T) {
	cases := []struct {
		name   string
		shards int
		edit   func(ts map[string]rawTensor)
		after  func(t *testing.T, dir string)
		wants  []string
	}{
		{name: "missing tensor", edit: func(ts map[string]rawTensor) {
			delete(ts, "language_model.model.layers.1.mlp.up_proj.weight")
		}, wants: []string{`tensor "language_model.model.layers.1.mlp.up_proj.weight" is missing (want shape [12 8])`}},
		{name: "wrong shape", edit: func(ts map[string]rawTensor) {
			ts["vision_model.patch_embed.pos_emb.weight"] = rawTensor{dtype: "F32", shape: []int64{6, 4, 8}, data: make([]byte, 6*4*8*4)}
		}, wants: []string{`tensor "vision_model.patch_embed.pos_emb.weight" has shape [6 4 8], but the config implies [4 6 8]`}},
		{name: "wrong lm head shape", edit: func(ts map[string]rawTensor) {
			ts[LMHeadName] = rawTensor{dtype: "F32", shape: []int64{8, 100}, data: make([]byte, 100*8*4)}
		}, wants: []string{`"language_model.lm_head.weight" has shape [8 100], but the config implies [100 8]`}},
		{name: "unknown dtype", edit: func(ts map[string]rawTensor) {
			ts["mlp1.0.bias"] = rawTensor{dtype: "I64", shape: []int64{32}, data: make([]byte, 32*8)}
		}, wants: []string{`tensor "mlp1.0.bias": dtype "I64" is not supported (want BF16, F16 or F32)`}},
		{name: "byte count disagrees with shape", edit: func(ts map[string]rawTensor) {
			ts["mlp1.0.bias"] = rawTensor{dtype: "F32", shape: []int64{32}, data: make([]byte, 64)}
		}, wants: []string{`tensor "mlp1.0.bias": 64 data bytes, but shape [32] of F32 needs 128`}},
		{name: "truncated file", after: func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, SingleFile), -2)
		}, wants: []string{"model.safetensors", "outside the", "truncated?"}},
		{name: "truncated inside header", after: func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, SingleFile), -1)
		}, wants: []string{"model.safetensors", "runs past the end", "truncated?"}},
		{name: "too short", after: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, SingleFile), []byte{1, 2, 3})
		}, wants: []string{"3 bytes, too short"}},
		{name: "huge header length", after: func(t *testing.T, dir string) {
			patchFile(t, filepath.Join(dir, SingleFile), 0, binary.LittleEndian.AppendUint64(nil, 1<<40))
		}, wants: []string{"header length 1099511627776 bytes is over the 104857600-byte limit"}},
		{name: "header not JSON", after: func(t *testing.T, dir string) {
			patchFile(t, filepath.Join(dir, SingleFile), 8, []byte("[}"))
		}, wants: []string{"header is not a JSON object"}},
		{name: "no weights", after: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, SingleFile)); err != nil {
				t.Fatal(err)
			}
		}, wants: []string{"no model.safetensors.index.json and no model.safetensors"}},
		{name: "index names a missing shard", shards: 2, after: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, shardName(1, 2))); err != nil {
				t.Fatal(err)
			}
		}, wants: []string{"model-00002-of-00002.safetensors", "no such file"}},
		{name: "index puts a tensor in the wrong shard", shards: 2, after: func(t *testing.T, dir string) {
			editIndex(t, dir, func(wm map[string]string) { wm["mlp1.0.bias"] = flip(wm["mlp1.0.bias"]) })
		}, wants: []string{`lists tensor "mlp1.0.bias" in`, "but it is in"}},
		{name: "index names a tensor nobody holds", shards: 2, after: func(t *testing.T, dir string) {
			editIndex(t, dir, func(wm map[string]string) { wm["ghost.weight"] = shardName(0, 2) })
		}, wants: []string{`lists tensor "ghost.weight" in model-00001-of-00002.safetensors, but no shard holds it`}},
		{name: "index escapes the directory", shards: 2, after: func(t *testing.T, dir string) {
			editIndex(t, dir, func(wm map[string]string) { wm["mlp1.0.bias"] = "../model.safetensors" })
		}, wants: []string{`weight_map["mlp1.0.bias"] = "../model.safetensors" is not a file name`}},
		{name: "tensor in two shards", shards: 2, after: func(t *testing.T, dir string) {
			// Rewrite shard 2 to also hold a tensor of shard 1.
			writeFile(t, filepath.Join(dir, shardName(1, 2)), encodeSafetensors(t, map[string]rawTensor{
				"mlp1.0.bias": {dtype: "F32", shape: []int64{32}, data: make([]byte, 128)},
			}))
		}, wants: []string{"is in both"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeCheckpoint(t, testConfig(), testPreprocessorConfig(), F32, tc.shards, tc.edit)
			if tc.after != nil {
				tc.after(t, dir)
			}
			m, err := Open(dir)
			if err == nil {
				m.Close()
				t.Fatal("opened a broken checkpoint")
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not mention %q", err, want)
				}
			}
		})
	}
}

func TestOpenReportsConfigErrors(t *testing.T) {
	dir := writeCheckpoint(t, testConfig(), testPreprocessorConfig(), F32, 1, nil)
	cfg := testConfig()
	delete(textConfigOf(cfg), "rope_theta")
	writeJSON(t, filepath.Join(dir, ConfigFile), cfg)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "text_config.rope_theta: missing") {
		t.Errorf("err = %v", err)
	}
}

// truncate cuts a file to n bytes; n = -1 cuts it in the middle of its header, n = -2
// drops its last 10 bytes.
func truncate(t *testing.T, path string, n int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch n {
	case -1:
		n = 8 + int64(binary.LittleEndian.Uint64(data[:8]))/2
	case -2:
		n = int64(len(data)) - 10
	}
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
}

func patchFile(t *testing.T, path string, at int, b []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(data[at:], b)
	writeFile(t, path, data)
}

func editIndex(t *testing.T, dir string, edit func(map[string]string)) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		t.Fatal(err)
	}
	edit(index.WeightMap)
	writeJSON(t, filepath.Join(dir, IndexFile), index)
}

func flip(shard string) string {
	if shard == shardName(0, 2) {
		return shardName(1, 2)
	}
	return shardName(0, 2)
}
