package tinymodel

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
	"github.com/locateanything/detect/engine/tokenizer"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// checkpointDir is the shipped tiny model, relative to this package.
var checkpointDir = filepath.Join("..", "..", "models", "tiny-shapes")

// Accuracy floors for the held-out scenes, set below what tools/tinymodel/evaluate.py
// measured on the shipped checkpoint (see models/tiny-shapes/MODEL_CARD.md), so that a
// broken engine fails while the model's honest misses do not.
const (
	minFoundIoU50     = 0.55 // share of ground-truth objects matched at IoU >= 0.5 (measured 0.667)
	minMeanIoU        = 0.45 // measured 0.541
	maxFalsePerQuery  = 0.65 // measured 0.450
	minNoneAccuracy   = 0.25 // measured 0.391 (23 absent queries)
	detectKindToCheck = "detect1"
)

// TestTokenizerMatchesPython: engine/tokenizer, reading the checkpoint's own vocab.json,
// merges.txt and added_tokens.json, encodes every golden text to exactly the ids the Python
// BPE that trained the model produced, and decodes them back.
func TestTokenizerMatchesPython(t *testing.T) {
	tok := loadTokenizer(t)
	f, err := os.Open(filepath.Join("testdata", "tokenizer_golden.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		var row struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("golden line %d: %v", n+1, err)
		}
		n++
		if got := tok.Encode(row.Text); !slices.Equal(got, row.IDs) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", row.Text, got, row.IDs)
		}
		// Encoding puts text in NFC, so decoding gives the NFC form back.
		if got := tok.Decode(row.IDs); got != norm.NFC.String(row.Text) {
			t.Errorf("Decode(%v) = %q, want %q", row.IDs, got, norm.NFC.String(row.Text))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("only %d golden texts", n)
	}
}

// TestConfigTokenRoles: every token role config.json names is the token the tokenizer
// gives that name, and the "None" answer is one ordinary (non-added) token.
func TestConfigTokenRoles(t *testing.T) {
	cfg, err := checkpoint.LoadConfig(checkpointDir)
	if err != nil {
		t.Fatal(err)
	}
	tok := loadTokenizer(t)
	roles := []struct {
		token string
		id    int
	}{
		{"<IMG_CONTEXT>", cfg.ImageTokenID},
		{"<box>", cfg.BoxStartTokenID}, {"</box>", cfg.BoxEndTokenID},
		{"<ref>", cfg.RefStartTokenID}, {"</ref>", cfg.RefEndTokenID},
		{"<0>", cfg.CoordStartTokenID}, {"<1000>", cfg.CoordEndTokenID},
		{"<|im_end|>", cfg.Text.EOSTokenID}, {"<|endoftext|>", cfg.Text.BOSTokenID},
	}
	for _, r := range roles {
		if id, ok := tok.ID(r.token); !ok || int(id) != r.id {
			t.Errorf("%s: tokenizer id %d (found %v), config.json says %d", r.token, id, ok, r.id)
		}
	}
	if got := tok.Encode("None"); len(got) != 1 || int(got[0]) != cfg.NoneTokenID {
		t.Errorf(`Encode("None") = %v, want the single none_token_id %d`, got, cfg.NoneTokenID)
	}
	for v := 0; v <= 1000; v += 250 {
		name := fmt.Sprintf("<%d>", v)
		if id, _ := tok.ID(name); int(id) != cfg.CoordStartTokenID+v {
			t.Errorf("%s has id %d, want coord_start_token_id + %d = %d", name, id, v, cfg.CoordStartTokenID+v)
		}
	}
	if tok.VocabSize() != cfg.Text.Vocab {
		t.Errorf("tokenizer has %d ids, config.json vocab_size is %d", tok.VocabSize(), cfg.Text.Vocab)
	}
}

type heldoutScene struct {
	File         string      `json:"file"`
	Kind         string      `json:"kind"`
	Task         string      `json:"task"`
	Query        string      `json:"query"`
	Width        int         `json:"width"`
	Height       int         `json:"height"`
	Truth        [][]float64 `json:"truth"`
	PromptIDs    []int32     `json:"prompt_ids"`
	TorchIDs     []int32     `json:"torch_ids"`
	TorchMargins []float64   `json:"torch_margins"`
	TorchText    string      `json:"torch_text"`
}

type heldoutSet struct {
	MaxNewTokens int            `json:"max_new_tokens"`
	Scenes       []heldoutScene `json:"scenes"`
}

// TestHeldoutScenes runs the held-out scenes through the whole engine (decode, preprocess,
// prompt, tokenizer, C backend, greedy loop, answer parser). For every scene the prompt ids
// equal the Python trainer's and the generated ids equal PyTorch's token for token; over the
// single-category detection scenes the parsed boxes reach the accuracy floors above.
func TestHeldoutScenes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the model on every held-out scene")
	}
	set := loadHeldout(t)
	p := openBundled(t, set.MaxNewTokens, "")

	var tally shapes.Tally
	for _, sc := range set.Scenes {
		data, err := os.ReadFile(filepath.Join("testdata", sc.File))
		if err != nil {
			t.Fatal(err)
		}
		prep, pred := predict(t, p, data, sc.Query, sc.Task, sc.File)
		if !slices.Equal(prep.PromptIDs, sc.PromptIDs) {
			t.Errorf("%s: prompt ids differ from the Python trainer's\n got %v\nwant %v", sc.File, prep.PromptIDs, sc.PromptIDs)
		}
		if !slices.Equal(pred.Tokens, sc.TorchIDs) {
			t.Errorf("%s (%s %q): C engine and PyTorch disagree\n   C %v %q\ntorch %v %q (margins %v)",
				sc.File, sc.Task, sc.Query, pred.Tokens, pred.RawText, sc.TorchIDs, sc.TorchText, sc.TorchMargins)
		}
		if sc.Kind == detectKindToCheck {
			tally.Add(truthBoxes(sc.Truth), normBoxes(pred.Detections))
		}
	}
	assertFloors(t, "through the pipeline", tally)
}

// normBoxes are the detections' boxes in the model's 0..1000 units, as the truth is.
func normBoxes(dets []engine.Detection) [][4]float64 {
	boxes := make([][4]float64, len(dets))
	for i, d := range dets {
		boxes[i] = [4]float64{float64(d.BoxNorm[0]), float64(d.BoxNorm[1]), float64(d.BoxNorm[2]), float64(d.BoxNorm[3])}
	}
	return boxes
}

// assertFloors logs the single-category detection figures and checks them against the
// floors above.
func assertFloors(t *testing.T, how string, tally shapes.Tally) {
	t.Helper()
	found, meanIoU, fpPerQuery, noneAcc := tally.Figures()
	t.Logf("%s, %s: %d queries, %d objects: found@0.5 %.3f, mean IoU %.3f, false positives per query %.3f, None accuracy %.3f (%d absent)",
		how, detectKindToCheck, tally.Queries, tally.Objects, found, meanIoU, fpPerQuery, noneAcc, tally.Absent)
	if tally.Objects == 0 || tally.Absent == 0 {
		t.Fatalf("held-out set has %d objects and %d absent queries; it needs both", tally.Objects, tally.Absent)
	}
	if found < minFoundIoU50 {
		t.Errorf("found@IoU0.5 = %.3f, want >= %.2f", found, minFoundIoU50)
	}
	if meanIoU < minMeanIoU {
		t.Errorf("mean IoU = %.3f, want >= %.2f", meanIoU, minMeanIoU)
	}
	if fpPerQuery > maxFalsePerQuery {
		t.Errorf("false positives per query = %.3f, want <= %.2f", fpPerQuery, maxFalsePerQuery)
	}
	if noneAcc < minNoneAccuracy {
		t.Errorf("None accuracy = %.3f, want >= %.2f", noneAcc, minNoneAccuracy)
	}
}

func loadTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(checkpointDir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func loadHeldout(t *testing.T) heldoutSet {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "heldout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var set heldoutSet
	if err := json.Unmarshal(data, &set); err != nil {
		t.Fatalf("heldout.json: %v", err)
	}
	if len(set.Scenes) == 0 || set.MaxNewTokens < 1 {
		t.Fatalf("heldout.json: %d scenes, max_new_tokens %d", len(set.Scenes), set.MaxNewTokens)
	}
	return set
}

func truthBoxes(rows [][]float64) [][4]float64 {
	out := make([][4]float64, 0, len(rows))
	for _, r := range rows {
		out = append(out, [4]float64{r[0], r[1], r[2], r[3]})
	}
	return out
}
