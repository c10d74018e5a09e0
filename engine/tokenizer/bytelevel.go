package tokenizer

// byteLevelRunes is GPT-2's bytes_to_unicode table: every byte gets a printable rune, so
// that a BPE vocabulary can be written as text. Printable Latin-1 bytes map to
// themselves; the other 68 bytes (controls, space, DEL, NBSP, soft hyphen, ...) map in
// order to U+0100 onwards. The space byte, for example, becomes U+0120 'Ġ'.
func byteLevelRunes() [256]rune {
	var runes [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if printableByte(byte(b)) {
			runes[b] = rune(b)
		} else {
			runes[b] = next
			next++
		}
	}
	return runes
}

// printableByte reports whether GPT-2's table maps b to itself.
func printableByte(b byte) bool {
	return ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || 0xAE <= b
}

// byteLevelDecoder inverts byteLevelRunes: index by rune, get the byte, or -1 for a rune
// that is not in the table. The table's runes all lie below 256+68.
type byteLevelDecoder [256 + 68]int16

func newByteLevelDecoder() *byteLevelDecoder {
	var d byteLevelDecoder
	for i := range d {
		d[i] = -1
	}
	for b, r := range byteLevelRunes() {
		d[r] = int16(b)
	}
	return &d
}

// bytes converts a vocabulary token written in byte-level runes back to raw bytes.
// It reports false when the token holds a rune outside the table.
func (d *byteLevelDecoder) bytes(token string, dst []byte) ([]byte, bool) {
	for _, r := range token {
		if r < 0 || int(r) >= len(d) || d[r] < 0 {
			return dst, false
		}
		dst = append(dst, byte(d[r]))
	}
	return dst, true
}
