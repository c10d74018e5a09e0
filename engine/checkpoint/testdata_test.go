package checkpoint

import (
	"encoding/binary"
	"math"
	"path/filepath"
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
