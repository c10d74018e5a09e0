package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"github.com/locateanything/detect/internal/cli"
	"io"
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
				"--in-token-limit", strconv.Itoa(g.InTokenLimit), "--grid", g.Grid, "--out", out}, &stdout, io.Discard)
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
	if err := runPreprocess([]string{"--help"}, &help, io.Discard); !errors.Is(err, flag.ErrHelp) || !strings.Contains(help.String(), "--canon-aspect") {
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
		if err := runPreprocess(args, &bytes.Buffer{}, io.Discard); !cli.IsUsage(err) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	// --canon-aspect alone derives the grid: 1080x1920 at 1024 tokens is 44x24 patches.
	var stdout bytes.Buffer
	if err := runPreprocess([]string{"--image", dog, "--out", out, "--canon-aspect", "1080x1920"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	var got preprocessOutput
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.GridHW != [2]int{44, 24} || got.CanonicalSize != [2]int{336, 616} {
		t.Errorf("derived grid: %+v (%v)", got, err)
	}
	// A missing or undecodable image is an error, not a usage error, and writes nothing.
	absent := filepath.Join(dir, "absent.png")
	err := runPreprocess([]string{"--image", "../../go.mod", "--out", absent}, &bytes.Buffer{}, io.Discard)
	if err == nil || cli.IsUsage(err) || !strings.Contains(err.Error(), "unrecognised image format") {
		t.Errorf("not an image: %v", err)
	}
	if _, err := os.Stat(absent); !os.IsNotExist(err) {
		t.Errorf("an output was written for a failed run (%v)", err)
	}
}

// TestPreprocessReadsTheWorkersSettings: without flags, preprocess resizes as the worker's
// engine would for LA_IN_TOKEN_LIMIT, LA_CANON_GRID, LA_CANON_ASPECT and LA_ENGINE (read
// as the service reads them), and a flag replaces the variable it names.
func TestPreprocessReadsTheWorkersSettings(t *testing.T) {
	dog := "../../testdata/images/dog.jpg"
	out := filepath.Join(t.TempDir(), "c.png")
	var said bytes.Buffer // what answered, on stderr: the last run's
	run := func(args ...string) preprocessOutput {
		t.Helper()
		var stdout bytes.Buffer
		said.Reset()
		if err := runPreprocess(append([]string{"--image", dog, "--out", out}, args...), &stdout, &said); err != nil {
			t.Fatal(err)
		}
		var got preprocessOutput
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	served := run() // LA_ENGINE cpu, native grid at the served 1024 patches
	if served.GridHW != [2]int{28, 38} {
		t.Fatalf("defaults: grid %v, want the native [28 38] at 1024 patches", served.GridHW)
	}
	if want := "worker preprocess: the served processor (patch 14, merge 2; no checkpoint read), in-token limit 1024, grid native\n"; said.String() != want {
		t.Errorf("stderr %q, want %q", said.String(), want)
	}
	t.Setenv("LA_IN_TOKEN_LIMIT", "256")
	if got := run(); got.NumImageTokens >= served.NumImageTokens/2 || got.GridHW == served.GridHW {
		t.Errorf("LA_IN_TOKEN_LIMIT=256: %+v, want a smaller native grid than %+v", got, served)
	}
	if got := run("--in-token-limit", "1024"); got != served {
		t.Errorf("--in-token-limit 1024 over LA_IN_TOKEN_LIMIT=256: %+v, want %+v", got, served)
	}
	t.Setenv("LA_IN_TOKEN_LIMIT", "0")
	t.Setenv("LA_CANON_GRID", "24x44")
	if got := run(); got.GridHW != [2]int{24, 44} {
		t.Errorf("LA_CANON_GRID=24x44: grid %v", got.GridHW)
	}
	t.Setenv("LA_CANON_GRID", "")
	t.Setenv("LA_ENGINE", "sim") // empty LA_CANON_GRID: derived from LA_CANON_ASPECT off the cpu engine
	t.Setenv("LA_CANON_ASPECT", "1080x1920")
	if got := run(); got.GridHW != [2]int{44, 24} {
		t.Errorf("LA_ENGINE=sim, LA_CANON_ASPECT=1080x1920: grid %v, want [44 24]", got.GridHW)
	}
	if got := run("--grid", "native"); got != served {
		t.Errorf("--grid native: %+v, want %+v", got, served)
	}
	t.Setenv("LA_IN_TOKEN_LIMIT", "-1")
	if err := runPreprocess([]string{"--image", dog, "--out", out}, &bytes.Buffer{}, io.Discard); !cli.IsUsage(err) || !strings.Contains(err.Error(), "LA_IN_TOKEN_LIMIT") {
		t.Errorf("LA_IN_TOKEN_LIMIT=-1: %v, want a usage error naming it", err)
	}
}
