package tokenizer

import (
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzEncodeDecode checks that Encode never panics, yields only known ids, and that
// decoding gives the text back up to NFC, bytes that are not UTF-8 included. NFC is
// applied to the pieces between added tokens, so both sides are normalized once more
// before comparing: "<box>" followed by U+0338 stays two pieces in the encoding, but
// whole-string NFC composes it to "<box≯".
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{
		"", "Hello, my dog is cute", "x   \n  y", "I'm can't we'LL", "<|im_start|>user\n<image 1>",
		"<img><IMG_CONTEXT><IMG_CONTEXT></img>", "<box><282><414></box>", "person</c>car",
		"cafe\u0301", "<box>\u0338", "\xff\xfe\x00", "🙂👨‍👩‍👧‍👦", "ſ'ſ", "\r\n\r\n \t\u3000",
	} {
		f.Add(s)
	}
	tok := testTokenizer(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if _, ok := tok.Token(id); !ok {
				t.Fatalf("Encode(%q) yields unknown id %d", s, id)
			}
		}
		got := tok.Decode(ids)
		if norm.NFC.String(got) != norm.NFC.String(s) {
			t.Fatalf("Decode(Encode(%q)) = %q, want NFC %q", s, got, norm.NFC.String(s))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Decode(Encode(%q)) = %q is not valid UTF-8", s, got)
		}
	})
}
