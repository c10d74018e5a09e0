package tokenizer

import "slices"

// addedTokens finds the checkpoint's added tokens (<|im_start|>, <IMG_CONTEXT>, <box>,
// <0>..<1000>, ...) in text. They are matched whole and before normalization and BPE,
// so a special token is never split or altered. Where two start at the same position
// the longer wins, as in Hugging Face's tokenizers.
type addedTokens struct {
	ids     map[string]int32
	first   [256]bool // first bytes of the tokens: the only places a match can start
	lengths []int     // the distinct token lengths, longest first
}

func newAddedTokens(ids map[string]int32) addedTokens {
	a := addedTokens{ids: ids}
	for tok := range ids {
		a.first[tok[0]] = true
		if !slices.Contains(a.lengths, len(tok)) {
			a.lengths = append(a.lengths, len(tok))
		}
	}
	slices.Sort(a.lengths)
	slices.Reverse(a.lengths)
	return a
}

// next finds the first added token in s at or after from. It returns its position and
// id, or ok = false when there is none.
func (a *addedTokens) next(s string, from int) (start, end int, id int32, ok bool) {
	for i := from; i < len(s); i++ {
		if !a.first[s[i]] {
			continue
		}
		for _, n := range a.lengths {
			if i+n > len(s) {
				continue
			}
			if id, ok := a.ids[s[i:i+n]]; ok {
				return i, i + n, id, true
			}
		}
	}
	return 0, 0, 0, false
}
