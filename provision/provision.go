// Package provision decides which checkpoint a worker runs and gets it ready: the pinned
// LocateAnything-3B snapshot from the Hugging Face cache or the Hub (sub-package weights),
// the first-boot LLM extraction for the ttnn backend (sub-package extract), and the
// fallback to the small bundled model.
//
// The fallback never hides a mistake: the bundled model runs only when no weights were
// configured and the pinned snapshot is not in the cache at all. A configured directory
// that is missing or broken, a failed download and an incomplete snapshot in the cache are
// start-up errors.
package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/locateanything/detect/provision/weights"
)

// ModelName is what /info and results call the LocateAnything-3B checkpoint.
const ModelName = "LocateAnything-3B"

// Request says what the operator configured.
type Request struct {
	// Dir is LA_WEIGHTS_DIR (or its alias LA_MODEL_PATH); "" when not configured.
	Dir string
	// Hub says where the pinned snapshot is looked for and, with Download, fetched from.
	Hub weights.Options
	// Bundled finds (or unpacks) the bundled model; nil means there is none.
	Bundled func() (dir string, err error)
}

// Choice is the checkpoint the worker runs and why.
type Choice struct {
	Dir   string // the checkpoint directory
	Model string // what /info, /v1/models and results call it
	// Repo and Revision name the Hub snapshot when the directory is one (or a configured
	// copy of the 3B checkpoint); both empty otherwise.
	Repo, Revision string
	Reason         string // one line for the start-up log
}

// Choose applies the rules in the package comment.
func Choose(ctx context.Context, r Request) (Choice, error) {
	if r.Dir != "" {
		if err := checkCheckpoint(r.Dir); err != nil {
			return Choice{}, fmt.Errorf("LA_WEIGHTS_DIR %s: %w", r.Dir, err)
		}
		c := Choice{Dir: r.Dir, Model: modelName(r.Dir), Reason: "LA_WEIGHTS_DIR names it"}
		if c.Model == ModelName {
			c.Repo, c.Revision = weights.Repo, r.Hub.Revision
		}
		return c, nil
	}
	hub := r.Hub
	hub.Dir = ""
	dir, err := weights.Resolve(ctx, hub)
	if err == nil {
		return Choice{Dir: dir, Model: ModelName, Repo: weights.Repo, Revision: hub.Revision,
			Reason: "the pinned snapshot " + weights.Repo + "@" + hub.Revision}, nil
	}
	if hub.Download || !errors.Is(err, weights.ErrNotCached) {
		return Choice{}, err
	}
	if r.Bundled == nil {
		return Choice{}, fmt.Errorf("%w (and no bundled model)", err)
	}
	bundled, berr := r.Bundled()
	if berr != nil {
		return Choice{}, fmt.Errorf("%w (and the bundled model: %w)", err, berr)
	}
	return Choice{Dir: bundled, Model: modelName(bundled),
		Reason: "no weights configured and " + weights.Repo + " not in the Hugging Face cache: the bundled model"}, nil
}

// checkCheckpoint reports whether dir looks like a checkpoint: a directory with config.json.
func checkCheckpoint(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return errors.New("not a directory")
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("not a checkpoint: %w", err)
	}
	return nil
}

// modelName names the checkpoint in dir: LocateAnything-3B when it has the 3B's decoder
// width, else its directory's name (the bundled model is "tiny-shapes").
func modelName(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err == nil {
		var cfg struct {
			Text struct {
				Hidden int `json:"hidden_size"`
				Layers int `json:"num_hidden_layers"`
			} `json:"text_config"`
		}
		if json.Unmarshal(data, &cfg) == nil && cfg.Text.Hidden == 2048 && cfg.Text.Layers == 36 {
			return ModelName
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return filepath.Base(abs)
}
