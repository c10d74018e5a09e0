package storage

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestReadLimited(t *testing.T) {
	cases := []struct {
		input   string
		max     int64
		wantErr error
	}{
		{"", 0, nil},
		{"abc", 3, nil},
		{"abcd", 3, ErrTooLarge},
		{"a", 0, ErrTooLarge},
		{"abc", math.MaxInt64, nil}, // no overflow at the largest limit
	}
	for _, c := range cases {
		got, err := readLimited(strings.NewReader(c.input), c.max)
		if !errors.Is(err, c.wantErr) {
			t.Errorf("readLimited(%q, %d): %v, want %v", c.input, c.max, err, c.wantErr)
			continue
		}
		if err == nil && string(got) != c.input {
			t.Errorf("readLimited(%q, %d) = %q", c.input, c.max, got)
		}
	}
}
