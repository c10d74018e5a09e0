package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadTestConfig(t *testing.T, cfg, pp map[string]any) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, ConfigFile), cfg)
	writeJSON(t, filepath.Join(dir, PreprocessorConfigFile), pp)
	return LoadConfig(dir)
}

func TestLoadConfigReadsEveryField(t *testing.T) {
	c, err := loadTestConfig(t, testConfig(), testPreprocessorConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := TextConfig{Hidden: 8, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 12, Vocab: 100,
		MaxPositionEmbeddings: 4096, RopeTheta: 1e6, RMSNormEps: 1e-6, TieWordEmbeddings: true,
		EOSTokenID: 89, BOSTokenID: 88}
	if c.Text != want {
		t.Errorf("text config\n got %+v\nwant %+v", c.Text, want)
	}
	wantV := VisionConfig{Hidden: 8, Layers: 1, Heads: 2, Intermediate: 16, PatchSize: 14, MergeKernel: 2,
		PosEmbHeight: 4, PosEmbWidth: 6, NormEps: 1e-5}
	if c.Vision != wantV {
		t.Errorf("vision config\n got %+v\nwant %+v", c.Vision, wantV)
	}
	wantP := PreprocessorConfig{ImageMean: [3]float32{0.5, 0.5, 0.5}, ImageStd: [3]float32{0.5, 0.5, 0.5},
		InTokenLimit: 1024, PatchSize: 14, MergeKernel: 2}
	if c.Preprocessor != wantP {
		t.Errorf("preprocessor config\n got %+v\nwant %+v", c.Preprocessor, wantP)
	}
	ids := []int{c.ImageTokenID, c.BoxStartTokenID, c.BoxEndTokenID, c.RefStartTokenID, c.RefEndTokenID,
		c.CoordStartTokenID, c.CoordEndTokenID, c.NoneTokenID}
	wantIDs := []int{90, 91, 92, 93, 94, 95, 99, 50}
	for i := range ids {
		if ids[i] != wantIDs[i] {
			t.Errorf("token id %d = %d, want %d", i, ids[i], wantIDs[i])
		}
	}
	if got := c.ImageTokens(24, 44); got != 264 {
		t.Errorf("ImageTokens(24, 44) = %d, want 264", got)
	}
}

func TestLoadConfigExplicitHeadDimAndVariants(t *testing.T) {
	cfg := testConfig()
	tc := textConfigOf(cfg)
	tc["head_dim"] = 6                 // not hidden/heads: the explicit value wins
	tc["eos_token_id"] = []int{89, 88} // Hugging Face allows a list
	delete(tc, "num_key_value_heads")  // defaults to the head count
	delete(tc, "bos_token_id")
	visionConfigOf(cfg)["merge_kernel_size"] = 2 // a plain integer is fine too
	pp := testPreprocessorConfig()
	delete(pp, "patch_size") // taken from the vision config
	c, err := loadTestConfig(t, cfg, pp)
	if err != nil {
		t.Fatal(err)
	}
	if c.Text.HeadDim != 6 || c.Text.EOSTokenID != 89 || c.Text.KVHeads != 2 || c.Text.BOSTokenID != -1 {
		t.Errorf("got head_dim %d eos %d kv %d bos %d, want 6 89 2 -1", c.Text.HeadDim, c.Text.EOSTokenID, c.Text.KVHeads, c.Text.BOSTokenID)
	}
	if c.Vision.MergeKernel != 2 || c.Preprocessor.PatchSize != 14 {
		t.Errorf("merge %d patch %d, want 2 14", c.Vision.MergeKernel, c.Preprocessor.PatchSize)
	}
}

func TestLoadConfigErrorsNameFileAndField(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(cfg, pp map[string]any)
		wants []string
	}{
		{"missing text field", func(cfg, pp map[string]any) { delete(textConfigOf(cfg), "hidden_size") },
			[]string{"config.json: text_config.hidden_size: missing"}},
		{"missing several", func(cfg, pp map[string]any) {
			delete(visionConfigOf(cfg), "patch_size")
			delete(cfg, "image_token_index")
			delete(pp, "in_token_limit")
		}, []string{"vision_config.patch_size: missing", "config.json: image_token_index: missing", "preprocessor_config.json: in_token_limit: missing"}},
		{"missing section", func(cfg, pp map[string]any) { delete(cfg, "vision_config") },
			[]string{"config.json: vision_config: missing"}},
		{"string for int", func(cfg, pp map[string]any) { textConfigOf(cfg)["num_hidden_layers"] = "36" },
			[]string{`text_config.num_hidden_layers: want an integer, got "36"`}},
		{"fractional int", func(cfg, pp map[string]any) { textConfigOf(cfg)["intermediate_size"] = 2.5 },
			[]string{"text_config.intermediate_size: want an integer"}},
		{"bad bool", func(cfg, pp map[string]any) { textConfigOf(cfg)["tie_word_embeddings"] = "yes" },
			[]string{"text_config.tie_word_embeddings: want true or false"}},
		{"non-square merge", func(cfg, pp map[string]any) { visionConfigOf(cfg)["merge_kernel_size"] = []int{2, 3} },
			[]string{"vision_config.merge_kernel_size: want an integer or a square pair"}},
		{"short mean", func(cfg, pp map[string]any) { pp["image_mean"] = []float64{0.5, 0.5} },
			[]string{"preprocessor_config.json: image_mean: want a list of 3 numbers"}},
		{"heads do not divide", func(cfg, pp map[string]any) { textConfigOf(cfg)["num_key_value_heads"] = 3 },
			[]string{"num_attention_heads = 2 is not a multiple of num_key_value_heads = 3"}},
		{"odd head dim", func(cfg, pp map[string]any) { textConfigOf(cfg)["head_dim"] = 5 },
			[]string{"text_config.head_dim = 5, want even"}},
		{"vision head dim not multiple of 4", func(cfg, pp map[string]any) { visionConfigOf(cfg)["hidden_size"] = 12 },
			[]string{"vision head_dim = 6, want a multiple of 4"}},
		{"zero layers", func(cfg, pp map[string]any) { textConfigOf(cfg)["num_hidden_layers"] = 0 },
			[]string{"text_config.num_hidden_layers = 0, want 1..16777216"}},
		{"absurd layer count", func(cfg, pp map[string]any) { visionConfigOf(cfg)["num_hidden_layers"] = 2000000000 },
			[]string{"vision_config.num_hidden_layers = 2000000000, want 1..16777216"}},
		{"too many layers", func(cfg, pp map[string]any) { textConfigOf(cfg)["num_hidden_layers"] = 5000 },
			[]string{"text_config.num_hidden_layers = 5000, want at most 4096"}},
		{"token outside vocab", func(cfg, pp map[string]any) { cfg["image_token_index"] = 100 },
			[]string{"image_token_index = 100, outside the vocabulary [0, 100)"}},
		{"patch size disagrees", func(cfg, pp map[string]any) { pp["patch_size"] = 16 },
			[]string{"preprocessor_config.json: patch_size = 16, but config.json vision_config.patch_size = 14"}},
		{"zero std", func(cfg, pp map[string]any) { pp["image_std"] = []float64{0.5, 0, 0.5} },
			[]string{"image_std[1] = 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, pp := testConfig(), testPreprocessorConfig()
			tc.edit(cfg, pp)
			_, err := loadTestConfig(t, cfg, pp)
			if err == nil {
				t.Fatal("loaded a broken config")
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not mention %q", err, want)
				}
			}
		})
	}
}

func TestLoadConfigUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("missing config.json: err = %v", err)
	}
	writeFile(t, filepath.Join(dir, ConfigFile), []byte("{not json"))
	writeJSON(t, filepath.Join(dir, PreprocessorConfigFile), testPreprocessorConfig())
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "config.json: not a JSON object") {
		t.Errorf("broken config.json: err = %v", err)
	}
	data, _ := json.Marshal(testConfig())
	writeFile(t, filepath.Join(dir, ConfigFile), data)
	if err := os.Remove(filepath.Join(dir, PreprocessorConfigFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "preprocessor_config.json") {
		t.Errorf("missing preprocessor_config.json: err = %v", err)
	}
}
