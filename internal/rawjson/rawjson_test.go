package rawjson

import (
	"encoding/json"
	"math"
	"testing"
)

// TestMarshalKeepsTags: tags and ampersands stay as written, the output is json.Marshal's
// otherwise (compact, no trailing newline), and what json.Marshal refuses is refused.
func TestMarshalKeepsTags(t *testing.T) {
	v := map[string]any{"raw_text": "<ref>cat & dog</ref><box>[1,2,3,4]</box>", "n": 1}
	got, err := Marshal(v)
	if want := `{"n":1,"raw_text":"<ref>cat & dog</ref><box>[1,2,3,4]</box>"}`; err != nil || string(got) != want {
		t.Errorf("Marshal = %s, %v; want %s", got, err, want)
	}
	var back map[string]any
	if err := json.Unmarshal(got, &back); err != nil || back["raw_text"] != v["raw_text"] {
		t.Errorf("does not read back: %v %v", back, err)
	}
	if _, err := Marshal(math.NaN()); err == nil {
		t.Error("NaN marshalled")
	}
}
