package enginetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// CopyWithTextConfig makes dst a checkpoint like src with the text_config fields of set
// written over its config.json: every other file of src is linked, not copied. Tests use it
// for a config variant of a test model (text_config.causal_attn set, say).
func CopyWithTextConfig(src, dst string, set map[string]any) error {
	src, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("checkpoint copy: %w", err)
	}
	for _, e := range entries {
		if e.Name() == "config.json" {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return fmt.Errorf("checkpoint copy: %w", err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return fmt.Errorf("checkpoint copy: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("checkpoint copy: %s: %w", filepath.Join(src, "config.json"), err)
	}
	tc, ok := cfg["text_config"].(map[string]any)
	if !ok {
		return fmt.Errorf("checkpoint copy: %s has no text_config", filepath.Join(src, "config.json"))
	}
	for k, v := range set {
		tc[k] = v
	}
	if raw, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644)
}
