package tokenizer

import (
	"math"
	"strings"
	"sync"
)

// merge is one line of merges.txt: the pair it applies to is the map key, rank is its
// line number (lower merges first) and id is the token the pair becomes.
type merge struct {
	rank int32
	id   int32
}

// pairKey packs two token ids into one map key.
func pairKey(left, right int32) uint64 {
	return uint64(uint32(left))<<32 | uint64(uint32(right))
}

// maxCachedWordLen bounds the words the cache keeps: long words are rare, and caching
// them would let one odd input fill memory.
const maxCachedWordLen = 64

// bpe appends the ids of one pre-tokenized word to dst.
func (t *Tokenizer) bpe(word string, dst []int32) []int32 {
	if ids, ok := t.cache.get(word); ok {
		return append(dst, ids...)
	}
	ids := t.mergeWord(word)
	if len(word) <= maxCachedWordLen {
		t.cache.put(word, ids)
	}
	return append(dst, ids...)
}

// mergeWord runs byte pair encoding on word: start from one symbol per byte, then
// repeatedly merge every occurrence of the adjacent pair with the lowest rank until no
// pair has a merge. Each round is a linear scan; words are short, so this is faster in
// practice than a priority queue.
func (t *Tokenizer) mergeWord(word string) []int32 {
	symbols := make([]int32, len(word))
	for i := 0; i < len(word); i++ {
		symbols[i] = t.byteIDs[word[i]]
	}
	for len(symbols) > 1 {
		best := merge{rank: math.MaxInt32}
		var left, right int32
		for i := 0; i+1 < len(symbols); i++ {
			m, ok := t.merges[pairKey(symbols[i], symbols[i+1])]
			if ok && m.rank < best.rank {
				best, left, right = m, symbols[i], symbols[i+1]
			}
		}
		if best.rank == math.MaxInt32 {
			break
		}
		// Merge every occurrence, left to right, compacting in place.
		out := symbols[:0]
		for i := 0; i < len(symbols); i++ {
			if i+1 < len(symbols) && symbols[i] == left && symbols[i+1] == right {
				out = append(out, best.id)
				i++
			} else {
				out = append(out, symbols[i])
			}
		}
		symbols = out
	}
	return symbols
}

// wordCache remembers the ids of recently encoded words. It holds at most limit words
// in two generations: lookups promote a word from the older generation to the recent
// one, and when the recent generation is full it becomes the older one and the previous
// older one is dropped. That approximates least-recently-used eviction with two maps
// and no per-entry bookkeeping. Cached slices are never modified.
type wordCache struct {
	mu     sync.Mutex
	limit  int
	recent map[string][]int32
	older  map[string][]int32
}

func newWordCache(limit int) *wordCache {
	return &wordCache{limit: limit, recent: make(map[string][]int32)}
}

func (c *wordCache) get(word string) ([]int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.recent[word]; ok {
		return ids, true
	}
	if ids, ok := c.older[word]; ok {
		c.putLocked(word, ids)
		return ids, true
	}
	return nil, false
}

func (c *wordCache) put(word string, ids []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Clone the key: word is a slice of the caller's text, which must not be kept alive.
	c.putLocked(strings.Clone(word), ids)
}

func (c *wordCache) putLocked(word string, ids []int32) {
	if len(c.recent) >= c.limit/2 {
		c.older, c.recent = c.recent, make(map[string][]int32, c.limit/2)
	}
	c.recent[word] = ids
}

// len returns the number of cached words (for tests).
func (c *wordCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recent) + len(c.older)
}
