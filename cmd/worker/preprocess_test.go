package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"github.com/locateanything/detect/internal/cli"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/imageproc"
)

// preprocessGolden is a case of tools/goldens/imageproc/gen_preprocess.py: PIL's
// canonical image (its samples' sha256) and sizes for one input, limit and grid.
type preprocessGolden struct {
	Image        string `json:"image"` // relative to the repository root
	InTokenLimit int    `json:"in_token_limit"`
	Grid         string `json:"grid"`
	preprocessOutput
	SHA256 string `json:"sha256"`
}

// TestPreprocessMatchesPIL: for the photographs of testdata/images and the synthetic
// inputs of every format and layout, at limits 256 and 1024 and grids native and 24x44,
// `worker preprocess` writes PIL's canonical image sample for sample and prints its sizes.
func TestPreprocessMatchesPIL(t *testing.T) {
	raw, err := os.ReadFile("../../engine/imageproc/testdata/preprocess/goldens.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Cases []preprocessGolden }
	if err := json.Unmarshal(raw, &m); err != nil || len(m.Cases) == 0 {
		t.Fatalf("goldens: %v (%d cases)", err, len(m.Cases))
	}
	dir := t.TempDir()
	for i, g := range m.Cases {
		name := filepath.Base(g.Image) + "/" + strconv.Itoa(g.InTokenLimit) + "/" + g.Grid
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, strconv.Itoa(i)+".png")
			var stdout bytes.Buffer
			err := runPreprocess([]string{"--image", filepath.Join("../..", g.Image),
				"--in-token-limit", strconv.Itoa(g.InTokenLimit), "--grid", g.Grid, "--out", out}, &stdout)
			if err != nil {
				t.Fatal(err)
			}
			var got preprocessOutput
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, stdout.String())
			}
			if got != g.preprocessOutput {
				t.Errorf("printed %+v, PIL %+v", got, g.preprocessOutput)
			}
			rgb := readCanonicalPNG(t, out)
			if rgb.W != g.CanonicalSize[0] || rgb.H != g.CanonicalSize[1] {
				t.Fatalf("PNG is %dx%d, PIL's %v", rgb.W, rgb.H, g.CanonicalSize)
			}
			if sum := sha256.Sum256(rgb.Pix); hex.EncodeToString(sum[:]) != g.SHA256 {
				t.Errorf("the canonical image's samples differ from PIL's")
			}
		})
	}
}

func readCanonicalPNG(t *testing.T, path string) *imageproc.RGB {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, format, err := imageproc.Decode(data, 0)
	if err != nil || format != imageproc.FormatPNG {
		t.Fatalf("the output is not a PNG (%s): %v", format, err)
	}
	rgb, err := imageproc.ToRGB(img)
	if err != nil {
		t.Fatal(err)
	}
	return rgb
}

func TestPreprocessFlags(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "c.png")
	dog := "../../testdata/images/dog.jpg"
	var help bytes.Buffer
	if err := runPreprocess([]string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) || !strings.Contains(help.String(), "--canon-aspect") {
		t.Errorf("--help: %v, printed %q", err, help.String())
	}
	for _, args := range [][]string{
		{"--image", dog},                        // no --out
		{"--out", out},                          // no --image
		{"--image", dog, "--out", out, "extra"}, // a stray argument
		{"--image", dog, "--out", out, "--grid", "24x45"},
		{"--image", dog, "--out", out, "--grid", "24x44", "--canon-aspect", "1080x1920"},
		{"--image", dog, "--out", out, "--canon-aspect", "1920"},
		{"--image", dog, "--out", out, "--bogus"},
	} {
		if err := runPreprocess(args, &bytes.Buffer{}); !cli.IsUsage(err) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	// --canon-aspect alone derives the grid: 1080x1920 at 1024 tokens is 44x24 patches.
	var stdout bytes.Buffer
	if err := runPreprocess([]string{"--image", dog, "--out", out, "--canon-aspect", "1080x1920"}, &stdout); err != nil {
		t.Fatal(err)
	}
	var got preprocessOutput
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.GridHW != [2]int{44, 24} || got.CanonicalSize != [2]int{336, 616} {
		t.Errorf("derived grid: %+v (%v)", got, err)
	}
	// A missing or undecodable image is an error, not a usage error, and writes nothing.
	absent := filepath.Join(dir, "absent.png")
	err := runPreprocess([]string{"--image", "../../go.mod", "--out", absent}, &bytes.Buffer{})
	if err == nil || cli.IsUsage(err) || !strings.Contains(err.Error(), "unrecognised image format") {
		t.Errorf("not an image: %v", err)
	}
	if _, err := os.Stat(absent); !os.IsNotExist(err) {
		t.Errorf("an output was written for a failed run (%v)", err)
	}
}
