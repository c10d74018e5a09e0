package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestSplitWordsMatchesRegex compares the hand-written scanner with the split pattern
// run by Python's regex module (testdata/gen_pretokenize_golden.py), which implements the
// lookahead the scanner imitates.
func TestSplitWordsMatchesRegex(t *testing.T) {
	f, err := os.Open("testdata/pretokenize-golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		var g struct {
			Text  string   `json:"text"`
			Words []string `json:"words"`
		}
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if got := words(g.Text); !slices.Equal(got, g.Words) {
			t.Errorf("line %d: split %q\n got %q\nwant %q", n, g.Text, got, g.Words)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("only %d golden splits", n)
	}
}

func TestSplitWordsCases(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"", nil},
		{"x   \n  y", []string{"x", "   \n", " ", " y"}}, // \s*[\r\n]+ then \s+(?!\S)
		{"a  b", []string{"a", " ", " b"}},               // the last space leads the word
		{"a   ", []string{"a", "   "}},                   // trailing whitespace stays whole
		{"a 1", []string{"a", " ", "1"}},                 // a digit takes no leading space
		{"I'm", []string{"I", "'m"}},                     // contraction
		{"'LL'x", []string{"'LL", "'x"}},                 // any case; 'x is punctuation + letter
		{"2024", []string{"2", "0", "2", "4"}},           // digits one by one
		{" ...\n\nx", []string{" ...\n\n", "x"}},         // punctuation keeps its newlines
		{"\tthen", []string{"\tthen"}},                   // any non-newline leads letters
		{"\nthen", []string{"\n", "then"}},               // a newline does not
		{"a\xffb", []string{"a", "\xffb"}},               // invalid byte: like a symbol
		{"\xff\xfe ", []string{"\xff\xfe", " "}},         // ... and never lost
		{"é\u0301", []string{"é", "\u0301"}},             // a combining mark is not a letter
		{"x\u00a0y", []string{"x", "\u00a0y"}},           // NBSP is whitespace, leads letters
		{"1\u3000\u3000", []string{"1", "\u3000\u3000"}}, // ideographic space at the end
		{"''s", []string{"''", "s"}},                     // a punctuation run, not a contraction
		{"?!  \r\n\r\n  z", []string{"?!", "  \r\n\r\n", " ", " z"}},
	}
	for _, tt := range tests {
		if got := words(tt.text); !slices.Equal(got, tt.want) {
			t.Errorf("split %q = %q, want %q", tt.text, got, tt.want)
		}
	}
}

func words(s string) []string {
	var out []string
	splitWords(s, func(w string) { out = append(out, w) })
	if strings.Join(out, "") != s {
		panic("words do not concatenate to the text")
	}
	return out
}
