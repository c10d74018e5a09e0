package imageproc

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
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
	DecodedSHA   string `json:"decoded_sha256"`
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
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read golden: %v", err)
	}
	img, format, err := Decode(data, 0) // an RGB PNG; a tRNS colour in it is ignored, as by PIL
	if err == nil && format != FormatPNG {
		err = fmt.Errorf("format %s, want png", format)
	}
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
		s.max = max(s.max, d)
	}
	return s
}

// TestDecodeMatchesPIL: Decode plus ToRGB against the upstream processor's to_rgb of
// PIL's Image.open, for every input but an RGB PNG (its own golden): 0 samples may differ.
func TestDecodeMatchesPIL(t *testing.T) {
	checked := 0
	for _, g := range loadGoldens(t) {
		if g.Decoded == "" && g.DecodedSHA == "" {
			continue
		}
		checked++
		t.Run(g.Name, func(t *testing.T) {
			got := decodeFile(t, g.Input)
			if g.DecodedSHA != "" {
				if sum := sha256.Sum256(got.Pix); hex.EncodeToString(sum[:]) != g.DecodedSHA {
					t.Fatalf("%s (%s, mode %s): the %dx%d decoded samples differ from PIL's (sha256)", g.Input, g.What, g.Mode, got.W, got.H)
				}
				return
			}
			if d := compare(t, got, readRGBPNG(t, g.Decoded)); d.differ != 0 {
				t.Fatalf("%s (%s, mode %s): %d of %d samples differ from PIL (max %d), want 0",
					g.Input, g.What, g.Mode, d.differ, d.samples, d.max)
			}
		})
	}
	if checked == 0 {
		t.Fatal("no decoded goldens")
	}
}

// TestResizeMatchesPIL feeds PIL's own decoded pixels through the rescale, stretch and
// canonical squash: the 8-bit result must equal PIL's exactly.
func TestResizeMatchesPIL(t *testing.T) {
	for _, g := range loadGoldens(t) {
		if g.Decoded == "" && g.DecodedSHA != "" {
			continue // only the end-to-end test can use this one
		}
		t.Run(g.Name, func(t *testing.T) {
			var in *RGB
			if g.Decoded != "" {
				in = readRGBPNG(t, g.Decoded)
			} else {
				in = decodeFile(t, g.Input)
			}
			view, err := ModelViewRGB(in, g.options())
			if err != nil {
				t.Fatal(err)
			}
			if view.W != g.WantWidth || view.H != g.WantHeight {
				t.Fatalf("size %dx%d, PIL %dx%d", view.W, view.H, g.WantWidth, g.WantHeight)
			}
			if d := compare(t, view, readRGBPNG(t, g.Want)); d.differ != 0 {
				t.Fatalf("%s %dx%d limit %d canon %v: %d of %d samples differ from PIL (max %d)",
					g.What, g.Width, g.Height, g.InTokenLimit, g.CanonGrid, d.differ, d.samples, d.max)
			}
		})
	}
}

// TestEndToEndMatchesPIL decodes the file and compares what the model sees with PIL's:
// every format, JPEG included, to the sample.
func TestEndToEndMatchesPIL(t *testing.T) {
	for _, g := range loadGoldens(t) {
		t.Run(g.Name, func(t *testing.T) {
			img, _, err := g.options().Decode(mustRead(t, g.Input))
			if err != nil {
				t.Fatal(err)
			}
			view, err := ModelView(img, g.options())
			if err != nil {
				t.Fatal(err)
			}
			if d := compare(t, view, readRGBPNG(t, g.Want)); d.differ != 0 {
				t.Fatalf("%s (%s): %d of %d samples differ from PIL (max %d), want 0",
					g.Name, g.What, d.differ, d.samples, d.max)
			}
		})
	}
}

// TestPatchifyMatchesNumpy: normalization and layout equal torchvision's float32 maths
// bit for bit.
func TestPatchifyMatchesNumpy(t *testing.T) {
	var g golden
	for _, c := range loadGoldens(t) {
		if c.Name == "small_patches" {
			g = c
		}
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "small.patches.f32"))
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := Decode(mustRead(t, g.Input), 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Preprocess(img, g.options())
	if err != nil {
		t.Fatal(err)
	}
	if res.GridH != 2 || res.GridW != 4 || res.Width != 56 || res.Height != 28 {
		t.Fatalf("grid %dx%d size %dx%d, want 2x4 and 56x28", res.GridH, res.GridW, res.Width, res.Height)
	}
	if len(raw) != 4*len(res.Patches) {
		t.Fatalf("golden has %d floats, got %d", len(raw)/4, len(res.Patches))
	}
	for i, v := range res.Patches {
		want := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if v != want {
			t.Fatalf("patch value %d = %v, numpy %v", i, v, want)
		}
	}
}

func mustRead(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func readTestdata(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", name))
}

// BenchmarkPreprocess1080p is the whole host path for a 1920x1080 JPEG at limit 1024:
// decode, RGB conversion, rescale, stretch, normalize, patchify. Compare with
// tools/goldens/imageproc/bench_pil.py run in the same sitting.
func BenchmarkPreprocess1080p(b *testing.B) {
	data, err := readTestdata("bench_1920x1080.jpg")
	if err != nil {
		b.Fatal(err)
	}
	o := DefaultOptions()
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		img, _, err := Decode(data, 0)
		if err != nil {
			b.Fatal(err)
		}
		res, err := Preprocess(img, o)
		if err != nil || res.GridH != 24 || res.GridW != 44 {
			b.Fatalf("grid %dx%d: %v", res.GridH, res.GridW, err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
}

// BenchmarkStages splits BenchmarkPreprocess1080p into its parts: the JPEG decode
// (libjpeg-turbo), the resizes from the decoded RGBA (ModelView, what Preprocess runs),
// the same from RGB pixels (ModelViewRGB, the path of other formats), and patchify.
func BenchmarkStages(b *testing.B) {
	data, err := readTestdata("bench_1920x1080.jpg")
	if err != nil {
		b.Fatal(err)
	}
	img, _, err := Decode(data, 0)
	if err != nil {
		b.Fatal(err)
	}
	rgb, err := ToRGB(img)
	if err != nil {
		b.Fatal(err)
	}
	o := DefaultOptions()
	view, err := ModelView(img, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		cpuLoop(b, func() { Decode(data, 0) })
	})
	b.Run("model_view", func(b *testing.B) {
		cpuLoop(b, func() { ModelView(img, o) })
	})
	b.Run("model_view_rgb", func(b *testing.B) {
		cpuLoop(b, func() { ModelViewRGB(rgb, o) })
	})
	b.Run("patchify", func(b *testing.B) {
		cpuLoop(b, func() { Patchify(view, o) })
	})
}

// cpuLoop runs fn b.N times and reports the process CPU time per run, the steadier
// figure on a shared machine.
func cpuLoop(b *testing.B, fn func()) {
	cpu0 := processCPU()
	for b.Loop() {
		fn()
	}
	b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
}
