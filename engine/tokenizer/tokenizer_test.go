package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// loadTestTokenizer loads the reference Qwen2 files in testdata once per test binary.
var loadTestTokenizer = sync.OnceValues(func() (*Tokenizer, error) { return Load("testdata") })

func testTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := loadTestTokenizer()
	if err != nil {
		t.Fatalf("Load(testdata): %v", err)
	}
	return tok
}

type golden struct {
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

func readGolden(t testing.TB) []golden {
	t.Helper()
	f, err := os.Open("testdata/golden-encodings.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []golden
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var g golden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("golden line %d: %v", len(lines)+1, err)
		}
		lines = append(lines, g)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 59 {
		t.Fatalf("read %d golden lines, want 59", len(lines))
	}
	return lines
}

func TestEncodeMatchesGolden(t *testing.T) {
	tok := testTokenizer(t)
	for i, g := range readGolden(t) {
		got := tok.Encode(g.Text)
		if !slices.Equal(got, g.IDs) {
			t.Errorf("line %d: Encode(%q)\n got %v\nwant %v", i+1, g.Text, got, g.IDs)
		}
	}
}

// TestDecodeEnds: DecodeEnds gives Decode's text, and each id's span of it is that id
// decoded alone, an unknown id included.
func TestDecodeEnds(t *testing.T) {
	tok := testTokenizer(t)
	for i, g := range readGolden(t) {
		ids := append(slices.Clone(g.IDs), -1)
		text, ends := tok.DecodeEnds(ids)
		if want := tok.Decode(ids); text != want {
			t.Fatalf("line %d: DecodeEnds text %q, Decode %q", i+1, text, want)
		}
		if len(ends) != len(ids) || ends[len(ends)-1] != len(text) {
			t.Fatalf("line %d: %d ends for %d ids, last %v of %d bytes", i+1, len(ends), len(ids), ends, len(text))
		}
		from := 0
		for j, id := range ids {
			if got, want := text[from:ends[j]], tok.Decode([]int32{id}); got != want {
				t.Errorf("line %d: id %d spans %q, decodes alone to %q", i+1, id, got, want)
			}
			from = ends[j]
		}
	}
}

func TestDecodeGoldenIsNFC(t *testing.T) {
	tok := testTokenizer(t)
	for i, g := range readGolden(t) {
		if got, want := tok.Decode(g.IDs), norm.NFC.String(g.Text); got != want {
			t.Errorf("line %d: Decode = %q, want %q", i+1, got, want)
		}
	}
}
