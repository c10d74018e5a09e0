package checkpoint

import (
	"path/filepath"
	"strings"
	"testing"
)

// The ids parallel box decoding reads, from every committed checkpoint, as
// hybrid.py's TokenIds.from_config reads them (docs/hybrid-decoding.md, "Tokens").
func TestHybridTokenIDs(t *testing.T) {
	for _, c := range []struct {
		dir            string
		textMask, null int
	}{
		{"testdata/full-3b-config", 151676, 152678},
		{"../../testdata/checkpoints/tiny-bf16", 151676, 152678},
		{"../../models/tiny-shapes", 420, 1422},
		{"../../tools/refmodel/testdata/hybrid/tiny-shapes-blocks", 420, 1422},
	} {
		cfg, err := LoadConfig(filepath.FromSlash(c.dir))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.TextMaskTokenID != c.textMask || cfg.NullTokenID != c.null || cfg.BlockSize != 6 {
			t.Errorf("%s: text mask %d, null %d, block size %d; want %d, %d, 6", c.dir, cfg.TextMaskTokenID,
				cfg.NullTokenID, cfg.BlockSize, c.textMask, c.null)
		}
		if err := cfg.HybridError(); err != nil {
			t.Errorf("%s: %v", c.dir, err)
		}
	}
}

// A checkpoint without the block fields still loads (AR decoding needs none of them), and
// HybridError names each missing or wrong field.
func TestHybridErrorNamesTheFields(t *testing.T) {
	cfg := testConfig()
	c, err := loadTestConfig(t, cfg, testPreprocessorConfig())
	if err != nil {
		t.Fatal(err)
	}
	err = c.HybridError()
	if err == nil {
		t.Fatal("no error for a config without the block fields")
	}
	for _, want := range []string{"text_mask_token_id = -1", "null_token_id = -1", "block_size = 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}

	tc := textConfigOf(cfg)
	// causal_attn is read (the backends' block mask follows it) and hybrid decoding runs
	// with either value.
	tc["text_mask_token_id"], tc["null_token_id"], tc["block_size"], tc["causal_attn"] = 96, 99, 6, true
	if c, err = loadTestConfig(t, cfg, testPreprocessorConfig()); err != nil {
		t.Fatal(err)
	}
	if err := c.HybridError(); !c.Text.CausalAttn || err != nil {
		t.Errorf("causal_attn true: read %v, hybrid error %v", c.Text.CausalAttn, err)
	}
	delete(tc, "causal_attn")
	tc["text_mask_token_id"], tc["null_token_id"], tc["block_size"] = 96, 100, 6
	if c, err = loadTestConfig(t, cfg, testPreprocessorConfig()); err != nil {
		t.Fatal(err)
	}
	if err := c.HybridError(); err == nil || !strings.Contains(err.Error(), "null_token_id = 100") ||
		strings.Contains(err.Error(), "text_mask") {
		t.Errorf("null id outside the 100-id vocabulary: %v", err)
	}
	tc["null_token_id"], tc["block_size"] = 97, 4
	if c, err = loadTestConfig(t, cfg, testPreprocessorConfig()); err != nil {
		t.Fatal(err)
	}
	if err := c.HybridError(); err == nil || !strings.Contains(err.Error(), "block_size = 4, want 6") {
		t.Errorf("block size 4: %v", err)
	}
	tc["block_size"] = 6
	if c, err = loadTestConfig(t, cfg, testPreprocessorConfig()); err != nil {
		t.Fatal(err)
	}
	if err := c.HybridError(); err != nil {
		t.Errorf("a complete config: %v", err)
	}
}
