package tokenizer

import (
	"encoding/json"
	"maps"
	"os"
	"strings"
	"testing"
)

func TestParseTokenMap(t *testing.T) {
	got, err := parseTokenMap([]byte(" {\"a\": 1,\n \"\\\"\": 2, \"\\u0120x\": 3, \"\\ud83d\\ude97\": 4, \"é\":-5 } \n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"a": 1, `"`: 2, "Ġx": 3, "🚗": 4, "é": -5}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got, err := parseTokenMap([]byte("{}")); err != nil || len(got) != 0 {
		t.Errorf("empty object: %v, %v", got, err)
	}
}

// TestParseTokenMapAgreesWithEncodingJSON reads the real files both ways.
func TestParseTokenMapAgreesWithEncodingJSON(t *testing.T) {
	for _, name := range []string{VocabFile, AddedTokensFile} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]int32
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		got, err := parseTokenMap(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: the hand-written parser and encoding/json disagree", name)
		}
	}
}

func TestParseTokenMapErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{``, "want '{'"},
		{`[1]`, "want '{'"},
		{`{"a": 1`, "want ',' or '}'"},
		{`{"a" 1}`, "want ':'"},
		{`{"a": "1"}`, "want an integer id"},
		{`{"a": 1.5}`, "want ',' or '}'"},
		{`{"a": 99999999999}`, "want an integer id"},
		{`{"a": 1, "a": 2}`, "given twice"},
		{`{"a`, "unterminated string"},
		{`{"a\`, "unterminated string"},
		{"{\"a\nb\": 1}", "control character"},
		{`{"\x": 1}`, "invalid character"},
		{`{a: 1}`, "want a string"},
		{`{"a": 1} x`, "unexpected data"},
		{`{"a": 1,}`, "want a string"},
		{"{\"\x84\": 0}", "not valid UTF-8"},
	} {
		_, err := parseTokenMap([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTokenMap(%q) error = %v, want one containing %q", c.in, err, c.want)
		}
	}
}

func FuzzParseTokenMap(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": 1}`, `{"\u0120": 2, "b": -3}`, `{"a": 1, "a": 1}`, `{"\"": 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseTokenMap(data)
		if err != nil {
			return
		}
		// Whatever the scanner accepts, encoding/json must read the same way.
		var want map[string]int32
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("parseTokenMap accepted %q, encoding/json says %v", data, err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("parseTokenMap(%q) = %v, encoding/json %v", data, got, want)
		}
	})
}

// BenchmarkParseVocab compares the hand-written scanner with encoding/json on vocab.json,
// the reason the scanner exists.
func BenchmarkParseVocab(b *testing.B) {
	data, err := os.ReadFile("testdata/" + VocabFile)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("parseTokenMap", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseTokenMap(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var m map[string]int32
			if err := json.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
