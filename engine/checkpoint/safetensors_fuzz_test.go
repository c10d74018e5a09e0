package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"testing"
)

// FuzzParseSafetensors: whatever the bytes, parsing returns tensors whose data lies
// inside the buffer with the size the shape implies, or an error; it never panics.
func FuzzParseSafetensors(f *testing.F) {
	f.Add(encodeSafetensorsBytes(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Add(encodeSafetensorsBytes(`{"__metadata__":{"x":"y"},"b":{"dtype":"BF16","shape":[1,3],"data_offsets":[0,6]}}`, 6))
	f.Add(encodeSafetensorsBytes(`{"c":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, 2))
	f.Add(encodeSafetensorsBytes(`{"d":{"dtype":"F32","shape":[-1],"data_offsets":[4,0]}}`, 4))
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, buf []byte) {
		tensors, err := parseSafetensors(buf)
		if err != nil {
			return
		}
		for _, tt := range tensors {
			if int64(len(tt.Data)) != tt.Elements()*int64(tt.DType.Size()) {
				t.Fatalf("%s: %d bytes for shape %v of %v", tt.Name, len(tt.Data), tt.Shape, tt.DType)
			}
		}
	})
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
