package tokenizer

import (
	"strings"
	"sync"
)

// merge is one line of merges.txt: the pair it applies to is the map key, rank is its
// position in the file (lower merges first) and id is the token the pair becomes.
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
// repeatedly merge the adjacent pair with the lowest rank (the leftmost of equals) until
// no pair has a merge. The symbols form a linked list and the candidate pairs a heap,
// so a word of n bytes costs O(n log n) even when it is long: a plain rescan per merge
// would be quadratic, and one long word could stall the caller.
func (t *Tokenizer) mergeWord(word string) []int32 {
	if word == "" {
		return nil
	}
	symbols := make([]symbol, len(word))
	for i := range symbols {
		symbols[i] = symbol{id: t.byteIDs[word[i]], prev: int32(i) - 1, next: int32(i) + 1}
	}
	symbols[len(symbols)-1].next = -1

	var queue pairQueue
	for i := range len(symbols) - 1 {
		t.queuePair(&queue, symbols, int32(i))
	}
	for len(queue) > 0 {
		c := queue.pop()
		left := &symbols[c.left]
		if left.id != c.leftID || left.next < 0 || symbols[left.next].id != c.rightID {
			continue // an earlier merge changed this pair
		}
		right := &symbols[left.next]
		left.id = c.merged
		left.next = right.next
		if right.next >= 0 {
			symbols[right.next].prev = c.left
		}
		right.id = gone
		if left.prev >= 0 {
			t.queuePair(&queue, symbols, left.prev)
		}
		if left.next >= 0 {
			t.queuePair(&queue, symbols, c.left)
		}
	}

	ids := make([]int32, 0, len(symbols))
	for i := int32(0); i >= 0; i = symbols[i].next {
		ids = append(ids, symbols[i].id)
	}
	return ids
}

// symbol is one token of a word being merged, linked to its neighbours by index (-1 at
// the ends).
type symbol struct {
	id         int32
	prev, next int32
}

// gone marks a symbol merged into its left neighbour.
const gone = -1

// queuePair queues the pair that starts at symbols[left], if the merges have it.
func (t *Tokenizer) queuePair(q *pairQueue, symbols []symbol, left int32) {
	l, r := symbols[left].id, symbols[symbols[left].next].id
	if m, ok := t.merges[pairKey(l, r)]; ok {
		q.push(candidate{rank: m.rank, left: left, leftID: l, rightID: r, merged: m.id})
	}
}

// candidate is a pair that can merge, as it was when queued.
type candidate struct {
	rank            int32
	left            int32 // index of the left symbol
	leftID, rightID int32
	merged          int32
}

func (c candidate) before(d candidate) bool {
	return c.rank < d.rank || (c.rank == d.rank && c.left < d.left)
}

// pairQueue is a binary min-heap of candidates ordered by rank, then position.
type pairQueue []candidate

func (q *pairQueue) push(c candidate) {
	*q = append(*q, c)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h[i].before(h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *pairQueue) pop() candidate {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].before(h[least]) {
			least = l
		}
		if r < len(h) && h[r].before(h[least]) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return top
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
