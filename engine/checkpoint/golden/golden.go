// Package golden reads the reference outputs stored beside a test checkpoint
// (<checkpoint>/goldens/, written by tools/refmodel/gen_goldens.py) so a backend's
// parity test can feed the stored inputs and compare against the stored outputs.
//
// Each case holds the inputs (normalized patches, grid, prompt ids), debugging
// intermediates (resized position embedding, vision features before the merge) and the
// outputs (image embeddings after the projector, the prefill logits, 16 greedy ids) of
// the float32 PyTorch reference.
package golden

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// The array keys of a case's files.
const (
	Patches         = "patches"          // float32 [L, 3, 14, 14]
	PromptIDs       = "prompt_ids"       // int32 [S]
	PosEmb          = "pos_emb"          // float32 [L, vision hidden]
	VisionFeatures  = "vision_features"  // float32 [L, vision hidden], after final_layernorm
	ImageEmbeddings = "image_embeddings" // float32 [N, text hidden], after the projector
	PrefillLogits   = "prefill_logits"   // float32 [vocab], last prompt position
)

// FormatVersion is the index.json format this package reads.
const FormatVersion = 1

// Array names one raw little-endian array file.
type Array struct {
	File  string `json:"file"`
	DType string `json:"dtype"` // "float32" or "int32"
	Shape []int  `json:"shape"`
}

// Elements is the product of the shape.
func (a Array) Elements() int {
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

// Case is one image + query run through the reference.
type Case struct {
	Name               string           `json:"name"`
	Image              string           `json:"image"`
	ImageSize          [2]int           `json:"image_size"` // original width, height
	InTokenLimit       int              `json:"in_token_limit"`
	CanonicalSize      [2]int           `json:"canonical_size"` // width, height the model saw
	GridH              int              `json:"grid_h"`
	GridW              int              `json:"grid_w"`
	PosEmbInterpolated bool             `json:"pos_emb_interpolated"`
	NumImageTokens     int              `json:"num_image_tokens"`
	PromptLen          int              `json:"prompt_len"`
	Query              string           `json:"query"`
	Files              map[string]Array `json:"files"`
	// GreedyIDs[0] is the argmax of the prefill logits; GreedyIDs[i] the argmax after
	// feeding GreedyIDs[i-1]. GreedyMargins[i] is that step's top1 - top2 logit: where it
	// is within a backend's numerical error, the ids from there on may legitimately differ.
	GreedyIDs     []int32   `json:"greedy_ids"`
	GreedyMargins []float64 `json:"greedy_margins"`

	dir string
}

// Set is the goldens of one checkpoint.
type Set struct {
	Dir           string `json:"-"` // the goldens directory
	FormatVersion int    `json:"format_version"`
	Checkpoint    string `json:"checkpoint"`
	GreedySteps   int    `json:"greedy_steps"`
	Cases         []Case `json:"cases"`
}

// Load reads <checkpointDir>/goldens/index.json and checks that every array file is
// there with the size its shape implies.
func Load(checkpointDir string) (*Set, error) {
	dir := filepath.Join(checkpointDir, "goldens")
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("goldens: %w", err)
	}
	var s Set
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("goldens: %s: %w", filepath.Join(dir, "index.json"), err)
	}
	if s.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("goldens: %s: format_version %d, this reader knows %d", dir, s.FormatVersion, FormatVersion)
	}
	s.Dir = dir
	for i := range s.Cases {
		c := &s.Cases[i]
		c.dir = dir
		if len(c.GreedyIDs) != s.GreedySteps || len(c.GreedyMargins) != s.GreedySteps {
			return nil, fmt.Errorf("goldens: case %s: %d greedy ids and %d margins, want %d", c.Name, len(c.GreedyIDs), len(c.GreedyMargins), s.GreedySteps)
		}
		for _, key := range []string{Patches, PromptIDs, PosEmb, VisionFeatures, ImageEmbeddings, PrefillLogits} {
			a, ok := c.Files[key]
			if !ok {
				return nil, fmt.Errorf("goldens: case %s: no %q array", c.Name, key)
			}
			info, err := os.Stat(filepath.Join(dir, a.File))
			if err != nil {
				return nil, fmt.Errorf("goldens: case %s: %w", c.Name, err)
			}
			if want := int64(a.Elements()) * 4; info.Size() != want {
				return nil, fmt.Errorf("goldens: case %s: %s is %d bytes, shape %v needs %d", c.Name, a.File, info.Size(), a.Shape, want)
			}
		}
	}
	return &s, nil
}

func (c *Case) read(key, dtype string) ([]byte, Array, error) {
	a, ok := c.Files[key]
	if !ok {
		return nil, a, fmt.Errorf("goldens: case %s: no %q array", c.Name, key)
	}
	if a.DType != dtype {
		return nil, a, fmt.Errorf("goldens: case %s: %s is %s, not %s", c.Name, key, a.DType, dtype)
	}
	raw, err := os.ReadFile(filepath.Join(c.dir, a.File))
	if err != nil {
		return nil, a, fmt.Errorf("goldens: case %s: %w", c.Name, err)
	}
	if len(raw) != a.Elements()*4 {
		return nil, a, fmt.Errorf("goldens: case %s: %s is %d bytes, shape %v needs %d", c.Name, a.File, len(raw), a.Shape, a.Elements()*4)
	}
	return raw, a, nil
}

// Float32 reads a float32 array and its shape.
func (c *Case) Float32(key string) ([]float32, []int, error) {
	raw, a, err := c.read(key, "float32")
	if err != nil {
		return nil, nil, err
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, a.Shape, nil
}

// Int32 reads an int32 array and its shape.
func (c *Case) Int32(key string) ([]int32, []int, error) {
	raw, a, err := c.read(key, "int32")
	if err != nil {
		return nil, nil, err
	}
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, a.Shape, nil
}

// Diff summarises how far got is from want.
type Diff struct {
	MaxAbs  float64 // largest |got - want|
	At      int     // where it is
	WantMax float64 // largest |want|, the scale to judge MaxAbs against
}

// Compare measures got against want; they must have the same length.
func Compare(got, want []float32) (Diff, error) {
	if len(got) != len(want) {
		return Diff{}, fmt.Errorf("compare: %d values against %d", len(got), len(want))
	}
	var d Diff
	for i := range want {
		if w := math.Abs(float64(want[i])); w > d.WantMax {
			d.WantMax = w
		}
		diff := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(diff) {
			return Diff{MaxAbs: math.Inf(1), At: i}, nil
		}
		if diff > d.MaxAbs {
			d.MaxAbs, d.At = diff, i
		}
	}
	return d, nil
}

// Within reports whether the largest difference is at most tol times the largest
// reference value (a tolerance relative to the array's scale, not per element).
func (d Diff) Within(tol float64) bool { return d.MaxAbs <= tol*d.WantMax }

// String reads well in a test failure.
func (d Diff) String() string {
	return fmt.Sprintf("max |diff| %.3g at %d (reference scale %.3g, relative %.3g)", d.MaxAbs, d.At, d.WantMax, d.MaxAbs/math.Max(d.WantMax, 1e-30))
}
