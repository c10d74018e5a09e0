package golden

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/checkpoint"
)

var checkpoints = []string{"tiny-bf16", "tiny-f32"}

func checkpointDir(name string) string {
	return filepath.Join("..", "..", "..", "testdata", "checkpoints", name)
}

// The committed goldens load, agree with their checkpoint's config, and include a case
// with and without position-embedding interpolation.
func TestCommittedGoldensAreConsistent(t *testing.T) {
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			cfg, err := checkpoint.LoadConfig(checkpointDir(name))
			if err != nil {
				t.Fatal(err)
			}
			set, err := Load(checkpointDir(name))
			if err != nil {
				t.Fatal(err)
			}
			if set.Checkpoint != name || len(set.Cases) < 3 {
				t.Fatalf("checkpoint %q with %d cases", set.Checkpoint, len(set.Cases))
			}
			var exact, interpolated bool
			for _, c := range set.Cases {
				exact = exact || !c.PosEmbInterpolated
				interpolated = interpolated || c.PosEmbInterpolated
				if c.PosEmbInterpolated == (c.GridH == cfg.Vision.PosEmbHeight && c.GridW == cfg.Vision.PosEmbWidth) {
					t.Errorf("%s: pos_emb_interpolated = %v for grid %dx%d", c.Name, c.PosEmbInterpolated, c.GridH, c.GridW)
				}
				patches, shape, err := c.Float32(Patches)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(shape, []int{c.GridH * c.GridW, 3, 14, 14}) {
					t.Errorf("%s: patches shape %v", c.Name, shape)
				}
				for _, v := range patches {
					if v < -1 || v > 1 {
						t.Fatalf("%s: patch value %v outside [-1, 1]", c.Name, v)
					}
				}
				ids, _, err := c.Int32(PromptIDs)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, id := range ids {
					if id == int32(cfg.ImageTokenID) {
						n++
					}
				}
				if n != cfg.ImageTokens(c.GridH, c.GridW) || n != c.NumImageTokens || len(ids) != c.PromptLen {
					t.Errorf("%s: %d image tokens in %d ids; grid gives %d, index says %d in %d",
						c.Name, n, len(ids), cfg.ImageTokens(c.GridH, c.GridW), c.NumImageTokens, c.PromptLen)
				}
				emb, shape, err := c.Float32(ImageEmbeddings)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(shape, []int{n, cfg.Text.Hidden}) || len(emb) != n*cfg.Text.Hidden {
					t.Errorf("%s: image embeddings shape %v", c.Name, shape)
				}
				logits, _, err := c.Float32(PrefillLogits)
				if err != nil {
					t.Fatal(err)
				}
				if len(logits) != cfg.Text.Vocab {
					t.Fatalf("%s: %d logits, want %d", c.Name, len(logits), cfg.Text.Vocab)
				}
				if best := argmax(logits); best != int(c.GreedyIDs[0]) {
					t.Errorf("%s: argmax of prefill logits %d, greedy_ids[0] %d", c.Name, best, c.GreedyIDs[0])
				}
			}
			if !exact || !interpolated {
				t.Errorf("want cases with and without interpolation; exact=%v interpolated=%v", exact, interpolated)
			}
		})
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func TestLoadRejectsDamagedGoldens(t *testing.T) {
	src := filepath.Join(checkpointDir("tiny-f32"), "goldens")
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "goldens"), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	set, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "goldens", set.Cases[0].Files[PrefillLogits].File)
	if err := os.Truncate(victim, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "is 100 bytes") {
		t.Errorf("truncated array: err = %v", err)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "index.json") {
		t.Errorf("no goldens: err = %v", err)
	}
	if _, _, err := set.Cases[0].Int32(Patches); err == nil || !strings.Contains(err.Error(), "is float32, not int32") {
		t.Errorf("wrong dtype: err = %v", err)
	}
}

func TestCompare(t *testing.T) {
	d, err := Compare([]float32{1, 2.5, -3}, []float32{1, 2, -4})
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxAbs != 1 || d.At != 2 || d.WantMax != 4 || !d.Within(0.25) || d.Within(0.2) {
		t.Errorf("diff %+v", d)
	}
	if d, _ := Compare([]float32{float32(math.NaN())}, []float32{1}); d.Within(1e9) {
		t.Error("NaN counted as within tolerance")
	}
	if _, err := Compare([]float32{1}, nil); err == nil {
		t.Error("length mismatch accepted")
	}
}
