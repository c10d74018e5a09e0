package native

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The goldens come from the PyTorch reference (tools/refmodel, float32 compute) on the
// committed tiny checkpoints: tiny-bf16 (two shards, lm_head, 8x8 pos-emb grid) and
// tiny-f32 (one file, tied embeddings).
const checkpointsDir = "../../testdata/checkpoints"

// parityTolerance bounds max|got - want| / max|want| for image embeddings and logits.
const parityTolerance = 1e-4

type goldenFile struct {
	File  string `json:"file"`
	Shape []int  `json:"shape"`
}

type goldenCase struct {
	Name               string                `json:"name"`
	GridH              int                   `json:"grid_h"`
	GridW              int                   `json:"grid_w"`
	PosEmbInterpolated bool                  `json:"pos_emb_interpolated"`
	NumImageTokens     int                   `json:"num_image_tokens"`
	GreedyIDs          []int32               `json:"greedy_ids"`
	Files              map[string]goldenFile `json:"files"`
}

type goldenIndex struct {
	Checkpoint  string       `json:"checkpoint"`
	GreedySteps int          `json:"greedy_steps"`
	Cases       []goldenCase `json:"cases"`
}

func readGoldens(t *testing.T, ckpt string) (dir string, idx goldenIndex) {
	t.Helper()
	dir = filepath.Join(checkpointsDir, ckpt, "goldens")
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatalf("goldens of %s: %v", ckpt, err)
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatalf("goldens of %s: index.json: %v", ckpt, err)
	}
	if len(idx.Cases) == 0 {
		t.Fatalf("goldens of %s: no cases", ckpt)
	}
	return dir, idx
}

// readF32 reads a little-endian float32 golden and checks its element count.
func readF32(t *testing.T, dir string, f goldenFile) []float32 {
	t.Helper()
	raw := readRaw(t, dir, f)
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func readI32(t *testing.T, dir string, f goldenFile) []int32 {
	t.Helper()
	raw := readRaw(t, dir, f)
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func readRaw(t *testing.T, dir string, f goldenFile) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, f.File))
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	for _, d := range f.Shape {
		n *= d
	}
	if len(raw) != 4*n {
		t.Fatalf("%s: %d bytes, shape %v needs %d", f.File, len(raw), f.Shape, 4*n)
	}
	return raw
}

func TestParityWithPyTorchReference(t *testing.T) {
	lockThread(t)
	variants := []struct {
		name string
		opts Options
	}{
		{"default", Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2}},
		// bf16 weights widened a few rows at a time (1000 bytes: blocks that do not
		// divide the matrices), one thread.
		{"small-widen-blocks", Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 1,
			BackendOptions: map[string]string{"widen_block_bytes": "1000"}}},
		// decode straight from the file mapping
		{"mapped-weights", Options{MaxBatch: 1, MaxSeqLen: 512, Threads: 2,
			BackendOptions: map[string]string{"resident_weights": "0"}}},
	}
	for _, ckpt := range []string{"tiny-bf16", "tiny-f32"} {
		dir, idx := readGoldens(t, ckpt)
		m := openModel(t, filepath.Join(checkpointsDir, ckpt))
		for _, v := range variants {
			t.Run(ckpt+"/"+v.name, func(t *testing.T) {
				b := openBackend(t, m, v.opts)
				interpolated, exact := 0, 0
				for _, c := range idx.Cases {
					t.Run(c.Name, func(t *testing.T) {
						if c.PosEmbInterpolated {
							interpolated++
						} else {
							exact++
						}
						checkCase(t, b, dir, c)
					})
				}
				if interpolated == 0 || exact == 0 {
					t.Errorf("goldens cover %d interpolated and %d exact pos-emb grids, want both", interpolated, exact)
				}
			})
		}
	}
}

func checkCase(t *testing.T, b *Backend, dir string, c goldenCase) {
	if err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	patches := readF32(t, dir, c.Files["patches"])
	if err := b.Vision(patches, c.GridH, c.GridW); err != nil {
		t.Fatalf("vision: %v", err)
	}
	emb, n, dim := b.ImageEmbeddings()
	wantEmb := readF32(t, dir, c.Files["image_embeddings"])
	if n != c.NumImageTokens || n*dim != len(wantEmb) {
		t.Fatalf("image embeddings %d x %d, golden %v", n, dim, c.Files["image_embeddings"].Shape)
	}
	if d := relDiff(emb, wantEmb); d > parityTolerance {
		t.Errorf("image embeddings differ by %.3g relative (tolerance %g)", d, parityTolerance)
	} else {
		t.Logf("image embeddings: %.3g relative", d)
	}

	ids := readI32(t, dir, c.Files["prompt_ids"])
	tok, err := prefill1(b, ids)
	if err != nil {
		t.Fatalf("prefill: %v", err)
	}
	wantLogits := readF32(t, dir, c.Files["prefill_logits"])
	if d := relDiff(b.Logits(0), wantLogits); d > parityTolerance {
		t.Errorf("first-step logits differ by %.3g relative (tolerance %g)", d, parityTolerance)
	} else {
		t.Logf("first-step logits: %.3g relative", d)
	}

	got := []int32{tok}
	for len(got) < len(c.GreedyIDs) {
		if tok, err = decode1(b, tok); err != nil {
			t.Fatalf("decode step %d: %v", len(got), err)
		}
		got = append(got, tok)
	}
	if !slices.Equal(got, c.GreedyIDs) {
		t.Errorf("greedy ids\n got %v\nwant %v", got, c.GreedyIDs)
	}
}
