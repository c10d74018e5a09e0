package native

// The tests' three ways of driving a slot, in one place. The decoder's one entry point is
// Step (la_backend.h, ABI 4): a prefill is a step on a free slot with the whole prompt
// pending, a decode step one pending token per slot. Tests call these helpers rather than a
// backend's own methods, so that moving every backend onto Step alone changes only this
// file.

// prefillStep runs ids into the free slot and returns the greedy first token and its
// probability.
func prefillStep(b *Backend, slot int, ids []int32) (first int32, prob float32, err error) {
	return b.Prefill(slot, ids, true)
}

// prefillCacheStep runs ids into the free slot and picks no token (hybrid decoding then
// starts with a block step).
func prefillCacheStep(b *Backend, slot int, ids []int32) error {
	return b.PrefillCache(slot, ids)
}

// decodeStep appends tokens[i] to slots[i] and writes the greedy next token to next[i],
// and its probability to prob[i] when prob is not nil.
func decodeStep(b *Backend, slots []int, tokens, next []int32, prob []float32) error {
	return b.Decode(slots, tokens, next, prob)
}
