package imageproc

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// golden is one case of testdata/goldens.json, written by tools/goldens/imageproc/gen.py.
type golden struct {
	Name         string `json:"name"`
	Input        string `json:"input"`
	What         string `json:"what"`
	Format       string `json:"format"`
	Mode         string `json:"mode"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	InTokenLimit int    `json:"in_token_limit"`
	CanonGrid    [2]int `json:"canon_grid"`
	Decoded      string `json:"decoded"`
	Want         string `json:"want"`
	WantWidth    int    `json:"want_width"`
	WantHeight   int    `json:"want_height"`
}

func loadGoldens(t testing.TB) []golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "goldens.json"))
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	var m struct{ Cases []golden }
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("parse manifest: %v", err)
	}
	if len(m.Cases) == 0 {
		t.Fatal("manifest has no cases")
	}
	return m.Cases
}

func (g golden) options() Options {
	o := DefaultOptions()
	o.InTokenLimit = g.InTokenLimit
	o.CanonGrid = g.CanonGrid
	return o
}

// readRGBPNG loads an 8-bit RGB golden PNG (written by PIL) as RGB pixels.
func readRGBPNG(t testing.TB, name string) *RGB {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("open golden: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode golden %s: %v", name, err)
	}
	rgb, err := ToRGB(img)
	if err != nil {
		t.Fatalf("golden %s: %v", name, err)
	}
	return rgb
}

func decodeFile(t testing.TB, name string) *RGB {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read input: %v", err)
	}
	img, _, err := Decode(data, 0)
	if err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	rgb, err := ToRGB(img)
	if err != nil {
		t.Fatalf("to RGB %s: %v", name, err)
	}
	return rgb
}

// diffStats compares two images channel by channel.
type diffStats struct {
	max     int
	over1   int // samples differing by more than 1
	differ  int // samples differing at all
	samples int
}

func compare(t testing.TB, got, want *RGB) diffStats {
	t.Helper()
	if got.W != want.W || got.H != want.H {
		t.Fatalf("size %dx%d, want %dx%d", got.W, got.H, want.W, want.H)
	}
	s := diffStats{samples: len(want.Pix)}
	for i, w := range want.Pix {
		d := int(got.Pix[i]) - int(w)
		if d < 0 {
			d = -d
		}
		if d > 0 {
			s.differ++
		}
		if d > 1 {
			s.over1++
		}
		s.max = max(s.max, d)
	}
	return s
}

func (s diffStats) fraction() float64 { return float64(s.differ) / float64(s.samples) }

func TestGoldenExplore(t *testing.T) {
	for _, g := range loadGoldens(t) {
		ours := decodeFile(t, g.Input)
		in := ours
		if g.Decoded != "" {
			pil := readRGBPNG(t, g.Decoded)
			d := compare(t, ours, pil)
			t.Logf("%-26s decode: max %d, differ %.4f, >1 %d", g.Name, d.max, d.fraction(), d.over1)
			in = pil
		}
		want := readRGBPNG(t, g.Want)
		view, err := ModelViewRGB(in, g.options())
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		r := compare(t, view, want)
		e2e, err := ModelViewRGB(ours, g.options())
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		e := compare(t, e2e, want)
		t.Logf("%-26s resize: max %d differ %.4f | e2e max %d differ %.4f", g.Name, r.max, r.fraction(), e.max, e.fraction())
	}
}
