package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"math/big"
	"os"
	"testing"
	"unsafe"
)

// FuzzParseSafetensors: whatever the bytes, parsing returns an error or tensors sorted by
// unique name, of a known dtype and a shape of non-negative dimensions, whose data lies
// inside the buffer, cannot be appended into its neighbour's, and has exactly the size the
// shape implies, counted without overflow; it never panics.
func FuzzParseSafetensors(f *testing.F) {
	f.Add(encodeSafetensorsBytes(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Add(encodeSafetensorsBytes(`{"__metadata__":{"x":"y"},"b":{"dtype":"BF16","shape":[1,3],"data_offsets":[0,6]}}`, 6))
	f.Add(encodeSafetensorsBytes(`{"c":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, 2))
	f.Add(encodeSafetensorsBytes(`{"d":{"dtype":"F32","shape":[-1],"data_offsets":[4,0]}}`, 4))
	f.Add(encodeSafetensorsBytes(`{"e":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}}`, 4))
	f.Add(encodeSafetensorsBytes(`{"f":{"dtype":"F16","shape":[0,9223372036854775807],"data_offsets":[0,0]},"g":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`, 4))
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255})
	if header := realSafetensorsHeader(f); header != nil {
		f.Add(header) // the tiny checkpoint's header, its data cut off
	}
	f.Fuzz(func(t *testing.T, buf []byte) {
		tensors, err := parseSafetensors(buf)
		if err != nil {
			return
		}
		for i, tt := range tensors {
			if i > 0 && tensors[i-1].Name >= tt.Name || tt.Name == "__metadata__" {
				t.Fatalf("tensor %d is %q after %q", i, tt.Name, tensors[max(i-1, 0)].Name)
			}
			if tt.DType.Size() == 0 || tt.Shape == nil {
				t.Fatalf("%s: dtype %v shape %v", tt.Name, tt.DType, tt.Shape)
			}
			size := big.NewInt(int64(tt.DType.Size()))
			for _, d := range tt.Shape {
				if d < 0 {
					t.Fatalf("%s: shape %v", tt.Name, tt.Shape)
				}
				size.Mul(size, big.NewInt(d))
			}
			if size.Cmp(big.NewInt(int64(len(tt.Data)))) != 0 {
				t.Fatalf("%s: %d bytes for shape %v of %v (%v bytes)", tt.Name, len(tt.Data), tt.Shape, tt.DType, size)
			}
			if cap(tt.Data) != len(tt.Data) || len(tt.Data) > 0 && !within(tt.Data, buf) {
				t.Fatalf("%s: data is not a capped slice of the buffer", tt.Name)
			}
		}
	})
}

// within reports whether part is a sub-slice of whole.
func within(part, whole []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(part)))
	w := uintptr(unsafe.Pointer(unsafe.SliceData(whole)))
	return p >= w && p+uintptr(len(part)) <= w+uintptr(len(whole))
}

// realSafetensorsHeader is the length prefix and JSON header of the tiny test
// checkpoint's first shard (its tensor data left out, so small), or nil where the
// checkpoint is not there.
func realSafetensorsHeader(tb testing.TB) []byte {
	f, err := os.Open("../../testdata/checkpoints/tiny-bf16/model-00001-of-00002.safetensors")
	if err != nil {
		return nil
	}
	defer f.Close()
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		tb.Fatal(err)
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > 1<<20 {
		tb.Fatalf("header of %d bytes", size)
	}
	header := make([]byte, 8+size)
	copy(header, n[:])
	if _, err := io.ReadFull(f, header[8:]); err != nil {
		tb.Fatal(err)
	}
	return header
}

func encodeSafetensorsBytes(header string, dataLen int) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, make([]byte, dataLen)...)
}

// FuzzParseConfig: any pair of files gives a validated config or an error, never a panic.
func FuzzParseConfig(f *testing.F) {
	cfg, _ := json.Marshal(testConfig())
	pp, _ := json.Marshal(testPreprocessorConfig())
	f.Add(cfg, pp)
	f.Add([]byte(`{"text_config":{"num_attention_heads":0,"hidden_size":8},"vision_config":{"merge_kernel_size":[0,0]}}`), pp)
	f.Add([]byte(`{"text_config":{"eos_token_id":[]},"vision_config":null}`), []byte(`{"image_mean":[1,2]}`))
	// The repository's real configurations: the tiny checkpoints and the 3B model's.
	for _, dir := range []string{"../../testdata/checkpoints/tiny-bf16", "../../testdata/checkpoints/tiny-f32", "testdata/full-3b-config"} {
		c, err1 := os.ReadFile(dir + "/config.json")
		p, err2 := os.ReadFile(dir + "/preprocessor_config.json")
		if err1 == nil && err2 == nil {
			f.Add(c, p)
		}
	}
	f.Fuzz(func(t *testing.T, configJSON, preprocessorJSON []byte) {
		c, err := ParseConfig(configJSON, preprocessorJSON)
		if err != nil {
			return
		}
		if c.Validate() != nil || c.ImageTokens(4, 4) <= 0 || len(c.ExpectedTensors()) == 0 {
			t.Fatalf("accepted a config that does not validate: %+v", c)
		}
	})
}
