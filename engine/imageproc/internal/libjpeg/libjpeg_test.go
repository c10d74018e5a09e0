package libjpeg

import (
	"errors"
	"testing"
)

func TestBlankParameters(t *testing.T) {
	for tmpl, want := range map[string]string{
		"Unsupported marker type 0x%02x":                              "Unsupported marker type 0x#",
		"Corrupt JPEG data: %u extraneous bytes before marker 0x%02x": "Corrupt JPEG data: # extraneous bytes before marker 0x#",
		"Bogus message code %d":                                       "Bogus message code #",
		"100%% sure, %ld":                                             "100% sure, #",
		"trailing %":                                                  "trailing #",
		"no parameters":                                               "no parameters",
	} {
		if got := blankParameters(tmpl); got != want {
			t.Errorf("%q: %q, want %q", tmpl, got, want)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := ReadHeader(nil); err == nil {
		t.Error("an empty input has a header")
	}
	// SOI and the start of a SOF, then nothing: libjpeg runs out of data.
	_, err := ReadHeader([]byte{0xFF, 0xD8, 0xFF, 0xC0, 0x00})
	if !errors.Is(err, ErrTruncated) {
		t.Errorf("cut header: %v, want ErrTruncated", err)
	}
	// Not a JPEG at all: libjpeg's error_exit, returned rather than exiting.
	_, err = ReadHeader([]byte("this is not a jpeg"))
	var e *Error
	if !errors.As(err, &e) || e.Code == 0 || errors.Is(err, ErrTruncated) {
		t.Errorf("not a JPEG: %v", err)
	}
	h := Header{Width: 4, Height: 4, Components: 2}
	if err := Decode([]byte{0xFF, 0xD8}, h, make([]byte, 64), 16); err == nil {
		t.Error("two components decoded")
	}
	h.Components = 3
	if err := Decode([]byte{0xFF, 0xD8}, h, make([]byte, 15), 4); err == nil {
		t.Error("a buffer too small was accepted")
	}
}
