package storage

import (
	"fmt"
	"io"
	"math"
)

// readLimited reads r to the end, refusing with ErrTooLarge as soon as it has seen more than
// maxBytes bytes. It never holds more than maxBytes+1 bytes.
func readLimited(r io.Reader, maxBytes int64) ([]byte, error) {
	limit := maxBytes
	if limit < math.MaxInt64 {
		limit++ // one byte past the limit tells "exactly maxBytes" from "more"
	}
	data, err := io.ReadAll(io.LimitReader(r, limit))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%w: more than %d bytes read (the reported size was smaller)", ErrTooLarge, maxBytes)
	}
	return data, nil
}
