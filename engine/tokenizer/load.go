package tokenizer

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The files Load reads from a checkpoint directory.
const (
	VocabFile       = "vocab.json"        // byte-level token -> id
	MergesFile      = "merges.txt"        // "left right" per line, by rank
	AddedTokensFile = "added_tokens.json" // special and added token -> id
)

// maxTokenID guards against a corrupt file asking for a huge id table.
const maxTokenID = 1 << 24

// cacheWords is how many distinct words a Tokenizer remembers the BPE result of.
const cacheWords = 1 << 16

// Load reads a tokenizer from the checkpoint directory dir.
func Load(dir string) (*Tokenizer, error) {
	vocab, err := readVocab(filepath.Join(dir, VocabFile))
	if err != nil {
		return nil, err
	}
	added, err := readAddedTokens(filepath.Join(dir, AddedTokensFile))
	if err != nil {
		return nil, err
	}
	merges, err := readMerges(filepath.Join(dir, MergesFile), vocab)
	if err != nil {
		return nil, err
	}
	t, err := build(vocab, merges, added)
	if err != nil {
		return nil, fmt.Errorf("tokenizer in %s: %w", dir, err)
	}
	return t, nil
}

// readVocab reads vocab.json: one JSON object from token to id.
func readVocab(path string) (map[string]int32, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read vocabulary: %w", err)
	}
	vocab, err := parseTokenMap(data)
	if err != nil {
		return nil, fmt.Errorf("parse vocabulary %s: %w", path, err)
	}
	if len(vocab) == 0 {
		return nil, fmt.Errorf("vocabulary %s is empty", path)
	}
	return vocab, nil
}

// readAddedTokens reads added_tokens.json: one JSON object from token to id.
func readAddedTokens(path string) (map[string]int32, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read added tokens: %w", err)
	}
	added, err := parseTokenMap(data)
	if err != nil {
		return nil, fmt.Errorf("parse added tokens %s: %w", path, err)
	}
	if _, ok := added[""]; ok {
		return nil, fmt.Errorf("added tokens %s: empty token", path)
	}
	return added, nil
}

// readMerges reads merges.txt: an optional "#version" line, then one merge per line,
// two vocabulary tokens separated by one space, in rank order. Both tokens and their
// concatenation must be in the vocabulary.
func readMerges(path string, vocab map[string]int32) (map[uint64]merge, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read merges: %w", err)
	}
	defer f.Close()

	merges := make(map[uint64]merge, 160000)
	sc := bufio.NewScanner(f)
	var joined []byte
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if text == "" || (line == 1 && strings.HasPrefix(text, "#version")) {
			continue
		}
		left, right, ok := strings.Cut(text, " ")
		if !ok || left == "" || right == "" || strings.Contains(right, " ") {
			return nil, fmt.Errorf("merges %s line %d: want two tokens separated by one space, got %q", path, line, text)
		}
		leftID, okL := vocab[left]
		rightID, okR := vocab[right]
		joined = append(append(joined[:0], left...), right...)
		mergedID, okM := vocab[string(joined)] // no allocation for a map lookup
		if !okL || !okR || !okM {
			return nil, fmt.Errorf("merges %s line %d: %q, %q or %q is not in the vocabulary", path, line, left, right, left+right)
		}
		key := pairKey(leftID, rightID)
		if _, dup := merges[key]; !dup { // the first (lowest) rank wins
			merges[key] = merge{rank: int32(len(merges)), id: mergedID}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read merges %s: %w", path, err)
	}
	return merges, nil
}

// build checks the tables against each other and lays out the id-indexed ones.
func build(vocab map[string]int32, merges map[uint64]merge, added map[string]int32) (*Tokenizer, error) {
	numIDs := 0
	for tok, id := range vocab {
		if id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("vocabulary token %q has id %d, outside 0..%d", tok, id, maxTokenID-1)
		}
		numIDs = max(numIDs, int(id)+1)
	}
	for tok, id := range added {
		if id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("added token %q has id %d, outside 0..%d", tok, id, maxTokenID-1)
		}
		numIDs = max(numIDs, int(id)+1)
	}

	tokens := make([]string, numIDs)
	for tok, id := range vocab {
		if tokens[id] != "" {
			return nil, fmt.Errorf("id %d belongs to both %q and %q", id, tokens[id], tok)
		}
		tokens[id] = tok
	}
	for tok, id := range added {
		if prev := tokens[id]; prev != "" && prev != tok {
			return nil, fmt.Errorf("id %d belongs to both %q and added token %q", id, prev, tok)
		}
		if vid, ok := vocab[tok]; ok && vid != id {
			return nil, fmt.Errorf("added token %q has id %d but the vocabulary gives it %d", tok, id, vid)
		}
		tokens[id] = tok
	}

	// The text of every id, in one string: id i decodes to text[offsets[i]:offsets[i+1]].
	decoder := newByteLevelDecoder()
	var text []byte
	offsets := make([]uint32, numIDs+1)
	for id, tok := range tokens {
		if _, ok := added[tok]; ok {
			text = append(text, tok...)
		} else if tok != "" {
			var ok bool
			if text, ok = decoder.bytes(tok, text); !ok {
				return nil, fmt.Errorf("vocabulary token %q (id %d) is not written in byte-level characters", tok, id)
			}
		}
		offsets[id+1] = uint32(len(text))
	}

	t := &Tokenizer{
		vocab:   vocab,
		merges:  merges,
		added:   newAddedTokens(added),
		tokens:  tokens,
		text:    string(text),
		offsets: offsets,
		cache:   newWordCache(cacheWords),
	}
	for b, r := range byteLevelRunes() {
		id, ok := vocab[string(r)]
		if !ok {
			return nil, fmt.Errorf("vocabulary lacks the byte-level token %q for byte 0x%02x", string(r), b)
		}
		t.byteIDs[b] = id
	}
	return t, nil
}
