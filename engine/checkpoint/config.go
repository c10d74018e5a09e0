package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File names inside a checkpoint directory.
const (
	ConfigFile             = "config.json"
	PreprocessorConfigFile = "preprocessor_config.json"
	SingleFile             = "model.safetensors"
	IndexFile              = "model.safetensors.index.json"
)

// TextConfig is the Qwen2 decoder (config.json: text_config).
type TextConfig struct {
	Hidden                int     // hidden_size
	Layers                int     // num_hidden_layers
	Heads                 int     // num_attention_heads
	KVHeads               int     // num_key_value_heads (absent: Heads)
	HeadDim               int     // head_dim (absent: Hidden/Heads)
	Intermediate          int     // intermediate_size
	Vocab                 int     // vocab_size
	MaxPositionEmbeddings int     // max_position_embeddings
	RopeTheta             float64 // rope_theta
	RMSNormEps            float64 // rms_norm_eps
	TieWordEmbeddings     bool    // tie_word_embeddings (absent: false)
	EOSTokenID            int     // eos_token_id (first of a list)
	BOSTokenID            int     // bos_token_id (absent: -1)
	// CausalAttn is causal_attn (absent: false): upstream's hybrid loop then masks a
	// block's rows causally (row i sees rows 0..i of its block) instead of both ways; the
	// backends do the same (la_config.block_causal, set by engine/native).
	CausalAttn bool
}

// VisionConfig is the MoonViT tower (config.json: vision_config).
type VisionConfig struct {
	Hidden       int     // hidden_size
	Layers       int     // num_hidden_layers
	Heads        int     // num_attention_heads
	Intermediate int     // intermediate_size
	PatchSize    int     // patch_size
	MergeKernel  int     // merge_kernel_size (k or [k, k])
	PosEmbHeight int     // init_pos_emb_height
	PosEmbWidth  int     // init_pos_emb_width
	NormEps      float64 // layer_norm_eps (absent: 1e-5, MoonViT's constant)
}

// HeadDim is the per-head width of the vision attention.
func (v VisionConfig) HeadDim() int {
	if v.Heads == 0 {
		return 0
	}
	return v.Hidden / v.Heads
}

// PreprocessorConfig is preprocessor_config.json.
type PreprocessorConfig struct {
	ImageMean, ImageStd [3]float32 // image_mean, image_std
	InTokenLimit        int        // in_token_limit: most 14-px patches before the image is shrunk
	PatchSize           int        // patch_size (absent: the vision tower's)
	MergeKernel         int        // merge_kernel_size (absent: the vision tower's)
}

// Config is everything a backend and the host side read from a checkpoint's JSON files.
type Config struct {
	Text         TextConfig
	Vision       VisionConfig
	Preprocessor PreprocessorConfig

	ImageTokenID      int // image_token_index (<IMG_CONTEXT>)
	BoxStartTokenID   int // box_start_token_id
	BoxEndTokenID     int // box_end_token_id
	RefStartTokenID   int // ref_start_token_id
	RefEndTokenID     int // ref_end_token_id
	CoordStartTokenID int // coord_start_token_id (<0>)
	CoordEndTokenID   int // coord_end_token_id (<1000>)
	NoneTokenID       int // none_token_id

	// Parallel box decoding (docs/hybrid-decoding.md) reads three more values from
	// text_config; a checkpoint without them runs AR decoding only (HybridError says why).
	TextMaskTokenID int // text_config.text_mask_token_id (absent: -1)
	NullTokenID     int // text_config.null_token_id (absent: -1)
	BlockSize       int // text_config.block_size (absent: 0)
}

// HybridBlockSize is the only block size parallel box decoding is defined for: the
// acceptance rules read a box as six rows.
const HybridBlockSize = 6

// HybridError says why the checkpoint cannot run parallel box decoding, or is nil when it
// can: every token id the rules read is in the vocabulary and the block size is 6.
func (c *Config) HybridError() error {
	var errs []error
	for _, id := range []struct {
		name string
		id   int
	}{{"text_config.text_mask_token_id", c.TextMaskTokenID}, {"text_config.null_token_id", c.NullTokenID}} {
		if id.id < 0 || id.id >= c.Text.Vocab {
			errs = append(errs, fmt.Errorf("%s: %s = %d, want an id in [0, %d)", ConfigFile, id.name, id.id, c.Text.Vocab))
		}
	}
	if c.BlockSize != HybridBlockSize {
		errs = append(errs, fmt.Errorf("%s: text_config.block_size = %d, want %d", ConfigFile, c.BlockSize, HybridBlockSize))
	}
	return errors.Join(errs...)
}

// LoadConfig reads config.json and preprocessor_config.json from dir and checks that the
// dimensions fit together. Errors name the file and the field.
func LoadConfig(dir string) (*Config, error) {
	cfgData, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint config: %w", err)
	}
	ppData, err := os.ReadFile(filepath.Join(dir, PreprocessorConfigFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint config: %w", err)
	}
	cfg, err := ParseConfig(cfgData, ppData)
	if err != nil {
		return nil, fmt.Errorf("checkpoint config in %s: %w", dir, err)
	}
	return cfg, nil
}

// ParseConfig is LoadConfig on the two files' contents.
func ParseConfig(configJSON, preprocessorJSON []byte) (*Config, error) {
	var errs []error
	top, err := newFieldReader(ConfigFile, configJSON, &errs)
	if err != nil {
		return nil, err
	}
	pp, err := newFieldReader(PreprocessorConfigFile, preprocessorJSON, &errs)
	if err != nil {
		return nil, err
	}

	var c Config
	c.ImageTokenID = top.requiredInt("image_token_index")
	c.BoxStartTokenID = top.requiredInt("box_start_token_id")
	c.BoxEndTokenID = top.requiredInt("box_end_token_id")
	c.RefStartTokenID = top.requiredInt("ref_start_token_id")
	c.RefEndTokenID = top.requiredInt("ref_end_token_id")
	c.CoordStartTokenID = top.requiredInt("coord_start_token_id")
	c.CoordEndTokenID = top.requiredInt("coord_end_token_id")
	c.NoneTokenID = top.requiredInt("none_token_id")

	t := top.object("text_config")
	c.Text = TextConfig{
		Hidden:                t.requiredInt("hidden_size"),
		Layers:                t.requiredInt("num_hidden_layers"),
		Heads:                 t.requiredInt("num_attention_heads"),
		Intermediate:          t.requiredInt("intermediate_size"),
		Vocab:                 t.requiredInt("vocab_size"),
		MaxPositionEmbeddings: t.requiredInt("max_position_embeddings"),
		RopeTheta:             t.requiredFloat("rope_theta"),
		RMSNormEps:            t.requiredFloat("rms_norm_eps"),
		TieWordEmbeddings:     t.optionalBool("tie_word_embeddings", false),
		EOSTokenID:            t.requiredInt("eos_token_id"),
		BOSTokenID:            t.optionalInt("bos_token_id", -1),
		CausalAttn:            t.optionalBool("causal_attn", false),
	}
	c.TextMaskTokenID = t.optionalInt("text_mask_token_id", -1)
	c.NullTokenID = t.optionalInt("null_token_id", -1)
	c.BlockSize = t.optionalInt("block_size", 0)
	// Hugging Face's Qwen2 defaults: no num_key_value_heads means plain multi-head
	// attention, no head_dim means hidden split evenly over the heads.
	c.Text.KVHeads = t.optionalInt("num_key_value_heads", c.Text.Heads)
	if c.Text.Heads > 0 {
		c.Text.HeadDim = t.optionalInt("head_dim", c.Text.Hidden/c.Text.Heads)
	}

	v := top.object("vision_config")
	c.Vision = VisionConfig{
		Hidden:       v.requiredInt("hidden_size"),
		Layers:       v.requiredInt("num_hidden_layers"),
		Heads:        v.requiredInt("num_attention_heads"),
		Intermediate: v.requiredInt("intermediate_size"),
		PatchSize:    v.requiredInt("patch_size"),
		MergeKernel:  v.squareKernel("merge_kernel_size"),
		PosEmbHeight: v.requiredInt("init_pos_emb_height"),
		PosEmbWidth:  v.requiredInt("init_pos_emb_width"),
		NormEps:      v.optionalFloat("layer_norm_eps", 1e-5),
	}

	c.Preprocessor = PreprocessorConfig{
		ImageMean:    pp.triple("image_mean"),
		ImageStd:     pp.triple("image_std"),
		InTokenLimit: pp.requiredInt("in_token_limit"),
		PatchSize:    c.Vision.PatchSize,
		MergeKernel:  c.Vision.MergeKernel,
	}
	if pp.has("patch_size") {
		c.Preprocessor.PatchSize = pp.requiredInt("patch_size")
	}
	if pp.has("merge_kernel_size") {
		c.Preprocessor.MergeKernel = pp.squareKernel("merge_kernel_size")
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// maxDimension bounds every size and count in a config: far above any real model
// (the largest real value is the 152681-token vocabulary), far below overflow.
const maxDimension = 1 << 24

// maxLayers bounds the layer counts (the real model has 27 and 36).
const maxLayers = 4096

// Validate checks that the dimensions are positive and fit together the way the forward
// pass needs them to.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, file, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s", file, fmt.Sprintf(format, args...)))
		}
	}
	// The upper bound only catches corrupt files: a layer count of a billion would
	// otherwise make ExpectedTensors try to list a billion tensors.
	positive := func(file, name string, n int) {
		check(n > 0 && n <= maxDimension, file, "%s = %d, want 1..%d", name, n, maxDimension)
	}

	t := c.Text
	positive(ConfigFile, "text_config.hidden_size", t.Hidden)
	positive(ConfigFile, "text_config.num_hidden_layers", t.Layers)
	positive(ConfigFile, "text_config.num_attention_heads", t.Heads)
	positive(ConfigFile, "text_config.num_key_value_heads", t.KVHeads)
	positive(ConfigFile, "text_config.head_dim", t.HeadDim)
	positive(ConfigFile, "text_config.intermediate_size", t.Intermediate)
	positive(ConfigFile, "text_config.vocab_size", t.Vocab)
	positive(ConfigFile, "text_config.max_position_embeddings", t.MaxPositionEmbeddings)
	check(t.RopeTheta > 0, ConfigFile, "text_config.rope_theta = %g, want > 0", t.RopeTheta)
	check(t.RMSNormEps > 0, ConfigFile, "text_config.rms_norm_eps = %g, want > 0", t.RMSNormEps)
	if t.Heads > 0 && t.KVHeads > 0 {
		check(t.Heads%t.KVHeads == 0, ConfigFile,
			"text_config.num_attention_heads = %d is not a multiple of num_key_value_heads = %d", t.Heads, t.KVHeads)
	}
	check(t.HeadDim%2 == 0, ConfigFile, "text_config.head_dim = %d, want even (rotary pairs)", t.HeadDim)

	v := c.Vision
	positive(ConfigFile, "vision_config.hidden_size", v.Hidden)
	positive(ConfigFile, "vision_config.num_hidden_layers", v.Layers)
	positive(ConfigFile, "vision_config.num_attention_heads", v.Heads)
	positive(ConfigFile, "vision_config.intermediate_size", v.Intermediate)
	positive(ConfigFile, "vision_config.patch_size", v.PatchSize)
	positive(ConfigFile, "vision_config.merge_kernel_size", v.MergeKernel)
	positive(ConfigFile, "vision_config.init_pos_emb_height", v.PosEmbHeight)
	positive(ConfigFile, "vision_config.init_pos_emb_width", v.PosEmbWidth)
	check(v.NormEps > 0, ConfigFile, "vision_config.layer_norm_eps = %g, want > 0", v.NormEps)
	if v.Heads > 0 {
		check(v.Hidden%v.Heads == 0, ConfigFile,
			"vision_config.hidden_size = %d is not a multiple of num_attention_heads = %d", v.Hidden, v.Heads)
		// The 2D rotary embedding rotates groups of four: two elements by the column,
		// two by the row.
		check(v.HeadDim()%4 == 0, ConfigFile, "vision head_dim = %d, want a multiple of 4 (2D rotary)", v.HeadDim())
	}

	check(t.Layers <= maxLayers, ConfigFile, "text_config.num_hidden_layers = %d, want at most %d", t.Layers, maxLayers)
	check(v.Layers <= maxLayers, ConfigFile, "vision_config.num_hidden_layers = %d, want at most %d", v.Layers, maxLayers)

	p := c.Preprocessor
	positive(PreprocessorConfigFile, "in_token_limit", p.InTokenLimit)
	for i := range 3 {
		check(p.ImageStd[i] != 0, PreprocessorConfigFile, "image_std[%d] = 0", i)
	}
	check(p.PatchSize == v.PatchSize, PreprocessorConfigFile,
		"patch_size = %d, but config.json vision_config.patch_size = %d", p.PatchSize, v.PatchSize)
	check(p.MergeKernel == v.MergeKernel, PreprocessorConfigFile,
		"merge_kernel_size = %d, but config.json vision_config.merge_kernel_size = %d", p.MergeKernel, v.MergeKernel)

	ids := []struct {
		name string
		id   int
	}{
		{"image_token_index", c.ImageTokenID},
		{"box_start_token_id", c.BoxStartTokenID},
		{"box_end_token_id", c.BoxEndTokenID},
		{"ref_start_token_id", c.RefStartTokenID},
		{"ref_end_token_id", c.RefEndTokenID},
		{"coord_start_token_id", c.CoordStartTokenID},
		{"coord_end_token_id", c.CoordEndTokenID},
		{"none_token_id", c.NoneTokenID},
		{"text_config.eos_token_id", t.EOSTokenID},
	}
	for _, id := range ids {
		check(id.id >= 0 && id.id < t.Vocab, ConfigFile, "%s = %d, outside the vocabulary [0, %d)", id.name, id.id, t.Vocab)
	}
	check(c.CoordEndTokenID >= c.CoordStartTokenID, ConfigFile,
		"coord_end_token_id = %d is below coord_start_token_id = %d", c.CoordEndTokenID, c.CoordStartTokenID)
	return errors.Join(errs...)
}

// ImageTokens is the number of image embeddings (and <IMG_CONTEXT> slots) for a grid of
// gridH x gridW patches (0 for a config without a merge kernel).
func (c *Config) ImageTokens(gridH, gridW int) int {
	k := c.Vision.MergeKernel
	if k <= 0 {
		return 0
	}
	return (gridH / k) * (gridW / k)
}
