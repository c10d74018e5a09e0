package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer splits text into words the way Qwen2's split regex does:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)       contraction
//	|[^\r\n\p{L}\p{N}]?\p{L}+          a letter run, with one leading non-letter (" the", "\tthen")
//	|\p{N}                             one digit (numbers are split digit by digit)
//	| ?[^\s\p{L}\p{N}]+[\r\n]*         a punctuation run, with one leading space and trailing newlines
//	|\s*[\r\n]+                        whitespace up to and including the last newline
//	|\s+(?!\S)                         whitespace that does not touch the next word
//	|\s+                               any other whitespace
//
// Go's regexp has no lookahead, so wordEnd implements the alternatives by hand, in the
// same order: at each position the first alternative that matches wins, and within an
// alternative the quantifiers are greedy with the backtracking the regex would do.
//
// A byte that is not valid UTF-8 is treated like a symbol (it joins a punctuation run),
// so no input is ever lost: byte-level BPE encodes the raw byte.

// splitWords calls yield with each word of s in order. The words concatenate to s.
func splitWords(s string, yield func(word string)) {
	for i := 0; i < len(s); {
		end := wordEnd(s, i)
		yield(s[i:end])
		i = end
	}
}

// wordEnd returns the end of the word that starts at s[i]; i < len(s). The result is
// always greater than i.
func wordEnd(s string, i int) int {
	r, n := utf8.DecodeRuneInString(s[i:])

	if r == '\'' {
		if m := contractionLen(s[i+n:]); m > 0 {
			return i + n + m
		}
	}

	if isLetter(r) {
		return letterRunEnd(s, i+n)
	}
	if !isNewline(r) && !isNumber(r) {
		if next, m := utf8.DecodeRuneInString(s[i+n:]); isLetter(next) {
			return letterRunEnd(s, i+n+m)
		}
	}

	if isNumber(r) {
		return i + n
	}

	// " ?[^\s\p{L}\p{N}]+[\r\n]*": the optional space only counts if punctuation follows.
	start := i
	if r == ' ' {
		start = i + n
	}
	if end := punctRunEnd(s, start); end > start {
		return newlineRunEnd(s, end)
	}

	// r is whitespace: every other kind of rune was matched above.
	end := spaceRunEnd(s, i)
	if last := strings.LastIndexAny(s[i:end], "\r\n"); last >= 0 {
		return i + last + 1 // \s*[\r\n]+
	}
	if end == len(s) {
		return end // \s+(?!\S) at the end of the text
	}
	// \s+(?!\S): leave the last whitespace rune to lead the next word.
	if _, m := utf8.DecodeLastRuneInString(s[i:end]); end-m > i {
		return end - m
	}
	return end // \s+: a single whitespace rune before a word
}

// contractionLen returns the length of the contraction suffix ('s 't 're 've 'm 'll 'd,
// any case) that s starts with, after the apostrophe, or 0.
func contractionLen(s string) int {
	if len(s) >= 2 {
		switch a, b := asciiLower(s[0]), asciiLower(s[1]); {
		case a == 'r' && b == 'e', a == 'v' && b == 'e', a == 'l' && b == 'l':
			return 2
		}
	}
	if len(s) >= 1 {
		switch asciiLower(s[0]) {
		case 's', 't', 'm', 'd':
			return 1
		}
	}
	// Case-insensitive matching also folds U+017F LATIN SMALL LETTER LONG S to 's'.
	if strings.HasPrefix(s, "ſ") {
		return len("ſ")
	}
	return 0
}

// letterRunEnd returns the end of the run of letters starting at s[i].
func letterRunEnd(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isLetter(r) {
			break
		}
		i += n
	}
	return i
}

// punctRunEnd returns the end of the run of runes that are neither whitespace, letters
// nor numbers, starting at s[i].
func punctRunEnd(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if isSpace(r) || isLetter(r) || isNumber(r) {
			break
		}
		i += n
	}
	return i
}

// newlineRunEnd returns the end of the run of \r and \n starting at s[i].
func newlineRunEnd(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// spaceRunEnd returns the end of the whitespace run starting at s[i].
func spaceRunEnd(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isSpace(r) {
			break
		}
		i += n
	}
	return i
}

// The regex classes. utf8.RuneError (an invalid byte) is none of them.
func isLetter(r rune) bool  { return unicode.IsLetter(r) }
func isNumber(r rune) bool  { return unicode.IsNumber(r) }
func isSpace(r rune) bool   { return unicode.IsSpace(r) }
func isNewline(r rune) bool { return r == '\r' || r == '\n' }

func asciiLower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + ('a' - 'A')
	}
	return b
}
