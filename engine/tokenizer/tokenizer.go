package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer encodes text to Qwen2 token ids and back. Build one with Load; it is safe
// for concurrent use.
type Tokenizer struct {
	vocab   map[string]int32 // byte-level token -> id
	merges  map[uint64]merge // pairKey(left, right) -> rank and merged id
	added   addedTokens
	byteIDs [256]int32 // id of the single-byte token of each byte

	tokens  []string // id -> token as written in the files ("" for an unused id)
	text    string   // the decoded text of every id, back to back
	offsets []uint32 // id i decodes to text[offsets[i]:offsets[i+1]]

	cache *wordCache
}

// Encode returns the ids of text. Added tokens in text are kept whole; the text
// between them is put in NFC, pre-tokenized and byte pair encoded. Encode never fails:
// every byte has a token, and bytes that are not valid UTF-8 are encoded as they are.
func (t *Tokenizer) Encode(text string) []int32 {
	ids := make([]int32, 0, len(text)/3+1)
	for pos := 0; pos < len(text); {
		start, end, id, found := t.added.next(text, pos)
		if !found {
			start, end = len(text), len(text)
		}
		if start > pos {
			ids = t.encodePlain(text[pos:start], ids)
		}
		if found {
			ids = append(ids, id)
		}
		pos = end
	}
	return ids
}

// encodePlain appends the ids of text that holds no added token.
func (t *Tokenizer) encodePlain(text string, ids []int32) []int32 {
	splitWords(norm.NFC.String(text), func(word string) {
		ids = t.bpe(word, ids)
	})
	return ids
}

// Decode returns the text of ids: byte-level tokens become their bytes again, added
// tokens their own text. An id the tokenizer does not know decodes to U+FFFD, so that a
// bad id is visible rather than silently dropped. The result is not necessarily valid
// UTF-8: ids that end inside a multi-byte character (a generation cut short) give the
// character's first bytes.
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if piece, ok := t.piece(id); ok {
			b.WriteString(piece)
		} else {
			b.WriteString("\uFFFD")
		}
	}
	return b.String()
}

// DecodeEnds is Decode that also says where each id's text ends: id i decodes to
// text[ends[i-1]:ends[i]] (from 0 for the first). The answer parser lays the tokens'
// probabilities over the text with it.
func (t *Tokenizer) DecodeEnds(ids []int32) (text string, ends []int) {
	var b strings.Builder
	ends = make([]int, len(ids))
	for i, id := range ids {
		if piece, ok := t.piece(id); ok {
			b.WriteString(piece)
		} else {
			b.WriteString("\uFFFD")
		}
		ends[i] = b.Len()
	}
	return b.String(), ends
}

func (t *Tokenizer) piece(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.text[t.offsets[id]:t.offsets[id+1]], true
}

// ID returns the id of a token as the files write it: an added token ("<|im_end|>",
// "<box>", "<282>") or a byte-level vocabulary entry ("Ġcar").
func (t *Tokenizer) ID(token string) (int32, bool) {
	if id, ok := t.added.ids[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return id, ok
}

// Token returns the token with the given id as the files write it (byte-level form for
// vocabulary entries, so id 1803 is "Ġcar"). Use Decode for text.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.tokens[id], true
}

// VocabSize returns the number of ids, the highest id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }
