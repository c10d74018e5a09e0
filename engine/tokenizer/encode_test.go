package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestRoundTripIsNFC(t *testing.T) {
	tok := testTokenizer(t)
	texts := []string{
		"",
		"Locate all the instances that matches the following description: person</c>car.",
		"cafe\u0301 nai\u0308ve A\u030a",   // NFD input comes back composed
		"\u212b ångström \u2126",           // singletons normalize too
		"tabs\tand\r\nCRLF\n\n  spaces   ", // whitespace kept exactly
		"🙂👨‍👩‍👧‍👦 مرحبا こんにちは 한국어",
		"<ima ge> <IMG_CONTEXT <box <|im_end| </c>", // near misses of added tokens stay text
		"\x00\x01\x7f control bytes",
	}
	for _, s := range texts {
		if got, want := tok.Decode(tok.Encode(s)), norm.NFC.String(s); got != want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	}
}

func TestAddedTokensInsideText(t *testing.T) {
	tok := testTokenizer(t)
	id := func(s string) int32 {
		t.Helper()
		v, ok := tok.ID(s)
		if !ok {
			t.Fatalf("no id for %q", s)
		}
		return v
	}
	cat := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
	one := func(s string) []int32 { return []int32{id(s)} }

	tests := []struct {
		text string
		want []int32
	}{
		{"<|im_start|>user\n", cat(one("<|im_start|>"), []int32{872, 198})},
		{"<img><IMG_CONTEXT><IMG_CONTEXT><IMG_CONTEXT></img>",
			[]int32{151666, 151665, 151665, 151665, 151667}},
		{"<ref>car</ref><box><282><414><606><794></box><|im_end|>",
			[]int32{151672, 6918, 151673, 151668, 151677 + 282, 151677 + 414, 151677 + 606, 151677 + 794, 151669, 151645}},
		{"<0><1000><10>", []int32{151677, 152677, 151687}},
		{"<box>None</box>", []int32{151668, 4064, 151669}},
		{"person</c>car", []int32{8987, 522, 66, 29, 6918}}, // </c> is plain text
		{"a<box>b", cat(tok.Encode("a"), one("<box>"), tok.Encode("b"))},
		{"<|endoftext|><|endoftext|>", []int32{151643, 151643}},
	}
	for _, tt := range tests {
		got := tok.Encode(tt.text)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", tt.text, got, tt.want)
		}
		if back := tok.Decode(got); back != tt.text {
			t.Errorf("Decode(Encode(%q)) = %q", tt.text, back)
		}
	}
}

func TestAddedTokensLongestFirst(t *testing.T) {
	a := newAddedTokens(map[string]int32{"<a>": 1, "<a><b>": 2, "<b>": 3, "x": 4})
	var got []string
	for pos := 0; ; {
		start, end, id, ok := a.next("<a><b><b>x<a", pos)
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%d:%d=%d", start, end, id))
		pos = end
	}
	want := []string{"0:6=2", "6:9=3", "9:10=4"}
	if !slices.Equal(got, want) {
		t.Errorf("matches %v, want %v", got, want)
	}
}

func TestIDAndToken(t *testing.T) {
	tok := testTokenizer(t)
	if got := tok.VocabSize(); got != 152681 {
		t.Errorf("VocabSize = %d, want 152681", got)
	}
	for _, c := range []struct {
		token string
		id    int32
	}{
		{"!", 0}, {"Ġcar", 1803}, {"None", 4064}, {"<|endoftext|>", 151643}, {"<|im_end|>", 151645},
		{"<IMG_CONTEXT>", 151665}, {"<282>", 151677 + 282}, {"<switch>", 152679},
		{"<|la_unknown_152680|>", 152680},
	} {
		if id, ok := tok.ID(c.token); !ok || id != c.id {
			t.Errorf("ID(%q) = %d, %v; want %d", c.token, id, ok, c.id)
		}
		if token, ok := tok.Token(c.id); !ok || token != c.token {
			t.Errorf("Token(%d) = %q, %v; want %q", c.id, token, ok, c.token)
		}
	}
	for _, id := range []int32{-1, 152681, 1 << 30} {
		if token, ok := tok.Token(id); ok {
			t.Errorf("Token(%d) = %q, want none", id, token)
		}
	}
	if _, ok := tok.ID("</c>"); ok {
		t.Error(`ID("</c>") found; it is plain text`)
	}
}

func TestDecodeMarksUnknownIDs(t *testing.T) {
	tok := testTokenizer(t)
	if got, want := tok.Decode([]int32{9707, -5, 11, 999999}), "Hello\uFFFD,\uFFFD"; got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}
	// A generation cut inside a multi-byte character gives the bytes it has.
	ids := tok.Encode(" 🚗") // [11162 248 245]: the emoji's bytes span three tokens
	if len(ids) != 3 {
		t.Fatalf("Encode(\" 🚗\") = %v, want three tokens", ids)
	}
	if got := tok.Decode(ids[:2]); utf8.ValidString(got) || !strings.HasPrefix(" 🚗", got) {
		t.Errorf("Decode(first ids of \" 🚗\") = %q, want a proper prefix of its bytes", got)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := testTokenizer(t)
	texts := []string{"Hello, my dog is cute", "数字123456和中文混合 text", "person</c>car<box>", "x   \n  y"}
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 50; i++ {
				k := (g + i) % len(texts)
				if got := tok.Encode(texts[k]); !slices.Equal(got, want[k]) {
					errs <- fmt.Sprintf("Encode(%q) = %v, want %v", texts[k], got, want[k])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestWordCacheIsBounded(t *testing.T) {
	c := newWordCache(8)
	for i := 0; i < 100; i++ {
		c.put(fmt.Sprint("w", i), []int32{int32(i)})
		if n := c.len(); n > 8 {
			t.Fatalf("after %d puts the cache holds %d words, limit 8", i+1, n)
		}
	}
	if ids, ok := c.get("w99"); !ok || ids[0] != 99 {
		t.Errorf("latest word not cached: %v %v", ids, ok)
	}
	if _, ok := c.get("w0"); ok {
		t.Error("oldest word still cached")
	}
}

// writeTokenizer writes a tiny tokenizer: the 256 byte-level tokens plus extra tokens
// and merges.
func writeTokenizer(t *testing.T, extra []string, merges string, added string) string {
	t.Helper()
	dir := t.TempDir()
	var vocab strings.Builder
	vocab.WriteString("{")
	id := 0
	for _, r := range byteLevelRunes() {
		fmt.Fprintf(&vocab, "%q: %d, ", string(r), id)
		id++
	}
	for _, tok := range extra {
		fmt.Fprintf(&vocab, "%q: %d, ", tok, id)
		id++
	}
	vocab.WriteString(`"\u0120\u0120\u0120": 999}`)
	for name, body := range map[string]string{
		VocabFile: vocab.String(), MergesFile: "#version: 0.2\n" + merges, AddedTokensFile: added,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestMergeOrder(t *testing.T) {
	// "aa" merges before "ab", so "aab" is aa|b, and "aaa" merges left to right: aa|a.
	dir := writeTokenizer(t, []string{"aa", "ab", "aab"}, "a a\na b\naa b\n", `{"<s>": 1000}`)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	aa, _ := tok.ID("aa")
	aab, _ := tok.ID("aab")
	a, _ := tok.ID("a")
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"aab", []int32{aab}},
		{"aaa", []int32{aa, a}},
		{"aaaa<s>a", []int32{aa, aa, 1000, a}},
	} {
		if got := tok.Encode(c.text); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	if got := tok.VocabSize(); got != 1001 {
		t.Errorf("VocabSize = %d, want 1001", got)
	}
}

func TestLoadErrors(t *testing.T) {
	good := func() string { return writeTokenizer(t, []string{"ab"}, "a b\n", `{"<s>": 1000}`) }
	tests := []struct {
		name  string
		setup func() string
		want  string
	}{
		{"missing dir", func() string { return filepath.Join(t.TempDir(), "nope") }, "read vocabulary"},
		{"bad vocab json", func() string {
			d := good()
			os.WriteFile(filepath.Join(d, VocabFile), []byte(`{"a": `), 0o644)
			return d
		}, "parse vocabulary"},
		{"missing added tokens", func() string {
			d := good()
			os.Remove(filepath.Join(d, AddedTokensFile))
			return d
		}, "read added tokens"},
		{"merge of unknown token", func() string {
			return writeTokenizer(t, nil, "a b\n", `{}`)
		}, `"ab" is not in the vocabulary`},
		{"malformed merge line", func() string {
			return writeTokenizer(t, []string{"ab"}, "ab\n", `{}`)
		}, "line 2: want two tokens"},
		{"id collision", func() string {
			return writeTokenizer(t, []string{"ab"}, "a b\n", `{"<s>": 5}`)
		}, "id 5 belongs to both"},
		{"negative id", func() string {
			return writeTokenizer(t, []string{"ab"}, "a b\n", `{"<s>": -1}`)
		}, "outside"},
		{"empty added token", func() string {
			return writeTokenizer(t, []string{"ab"}, "a b\n", `{"": 2000}`)
		}, "empty token"},
		{"not byte-level", func() string {
			return writeTokenizer(t, []string{"ab", "▁x"}, "a b\n", `{}`)
		}, "not written in byte-level characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.setup())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
