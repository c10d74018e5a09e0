package checkpoint

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"testing"
)

// The committed tiny checkpoints (tools/refmodel/gen_checkpoint.py) open and carry what
// their presets promise.
func TestOpenCommittedTinyCheckpoints(t *testing.T) {
	cases := []struct {
		name       string
		dtype      DType
		files      int
		lmHead     bool
		headDim    int
		posH, posW int
	}{
		{name: "tiny-bf16", dtype: BF16, files: 2, lmHead: true, headDim: 8, posH: 8, posW: 8},
		{name: "tiny-f32", dtype: F32, files: 1, lmHead: false, headDim: 16, posH: 8, posW: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Open(filepath.Join("..", "..", "testdata", "checkpoints", tc.name))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if len(m.files) != tc.files {
				t.Errorf("%d files, want %d", len(m.files), tc.files)
			}
			if m.HasLMHead() != tc.lmHead {
				t.Errorf("HasLMHead = %v, want %v", m.HasLMHead(), tc.lmHead)
			}
			if m.Config.Text.HeadDim != tc.headDim || m.Config.Vision.PosEmbHeight != tc.posH || m.Config.Vision.PosEmbWidth != tc.posW {
				t.Errorf("head_dim %d pos-emb %dx%d, want %d %dx%d", m.Config.Text.HeadDim,
					m.Config.Vision.PosEmbHeight, m.Config.Vision.PosEmbWidth, tc.headDim, tc.posH, tc.posW)
			}
			want := len(m.Config.ExpectedTensors())
			if tc.lmHead {
				want++
			}
			if len(m.Tensors) != want || len(m.Extra()) != 0 {
				t.Errorf("%d tensors (%d extra), want %d", len(m.Tensors), len(m.Extra()), want)
			}
			for _, tensor := range m.Tensors {
				if tensor.DType != tc.dtype {
					t.Errorf("%s is %v, want %v", tensor.Name, tensor.DType, tc.dtype)
				}
			}
			// The final norm's gains are drawn around 4: a sane value read through the
			// mapping shows the bytes are where the header says.
			norm, _ := m.Tensor("language_model.model.norm.weight")
			var g float32
			if tc.dtype == BF16 {
				g = math.Float32frombits(uint32(binary.LittleEndian.Uint16(norm.Data)) << 16)
			} else {
				g = math.Float32frombits(binary.LittleEndian.Uint32(norm.Data))
			}
			if g < 2 || g > 6 {
				t.Errorf("norm gain[0] = %v, want about 4", g)
			}
		})
	}
}

// BenchmarkOpen measures opening the committed bf16 checkpoint: config parsing, two
// mmaps, header parsing and the shape checks (no weight bytes are read).
func BenchmarkOpen(b *testing.B) {
	dir := filepath.Join("..", "..", "testdata", "checkpoints", "tiny-bf16")
	for b.Loop() {
		m, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// The configuration of the real 3B model (as gen_checkpoint.py --preset full writes it)
// implies the real checkpoint's 769 tensors (770 with the head) and 7.66 GB of bf16.
func TestExpectedTensorsOfTheRealShapes(t *testing.T) {
	c, err := LoadConfig(filepath.Join("testdata", "full-3b-config"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Text.HeadDim != 128 || c.Vision.HeadDim() != 72 || c.ImageTokens(24, 44) != 264 {
		t.Errorf("head dims %d/%d, image tokens %d; want 128/72, 264", c.Text.HeadDim, c.Vision.HeadDim(), c.ImageTokens(24, 44))
	}
	specs := c.ExpectedTensors()
	if len(specs)+1 != 770 {
		t.Errorf("%d tensors + head, want 770", len(specs)+1)
	}
	elements := int64(0)
	seen := map[string]bool{}
	for _, s := range append(specs, TensorSpec{Name: LMHeadName, Shape: c.LMHeadShape()}) {
		if seen[s.Name] {
			t.Errorf("%s listed twice", s.Name)
		}
		seen[s.Name] = true
		n := int64(1)
		for _, d := range s.Shape {
			n *= d
		}
		elements += n
	}
	if got := elements * 2; got != 7_661_331_936 {
		t.Errorf("%d bytes of bf16, want 7661331936", got)
	}
	qkv, _ := findSpec(specs, "vision_model.encoder.blocks.26.wqkv.weight")
	mlp1, _ := findSpec(specs, "mlp1.1.weight")
	if !slices.Equal(qkv.Shape, []int64{3456, 1152}) || !slices.Equal(mlp1.Shape, []int64{2048, 4608}) {
		t.Errorf("wqkv %v, mlp1.1 %v", qkv.Shape, mlp1.Shape)
	}
}

func findSpec(specs []TensorSpec, name string) (TensorSpec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return TensorSpec{}, false
}
