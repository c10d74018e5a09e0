package imageproc

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

// jpegHeaderOnly is a baseline JPEG that declares w x h with the given component count
// and ends right after its start of scan: what libjpeg's header reader needs, and no data.
func jpegHeaderOnly(w, h uint16, comps int) []byte {
	var b bytes.Buffer
	b.Write([]byte{0xFF, 0xD8})
	sof := []byte{8, 0, 0, 0, 0, byte(comps)}
	binary.BigEndian.PutUint16(sof[1:], h)
	binary.BigEndian.PutUint16(sof[3:], w)
	for c := 1; c <= comps; c++ {
		sof = append(sof, byte(c), 0x11, 0)
	}
	marker(&b, 0xC0, sof)
	sos := []byte{byte(comps)}
	for c := 1; c <= comps; c++ {
		sos = append(sos, byte(c), 0)
	}
	marker(&b, 0xDA, append(sos, 0, 63, 0))
	return b.Bytes()
}

func marker(b *bytes.Buffer, code byte, body []byte) {
	b.Write([]byte{0xFF, code})
	binary.Write(b, binary.BigEndian, uint16(len(body)+2))
	b.Write(body)
}

func TestJPEGBombRefusedFromHeader(t *testing.T) {
	bomb := jpegHeaderOnly(50000, 50000, 3)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, format, err := Decode(bomb, 0)
	runtime.ReadMemStats(&after)
	wantInputError(t, err, engine.CodeImageTooLarge, "jpeg", "50000x50000")
	if format != FormatJPEG {
		t.Errorf("format %q", format)
	}
	// 50000x50000 RGBA would be 10 GB; the refusal must not have allocated even 1 MB.
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("refusing the header allocated %d bytes", n)
	}
	// Under the budget the same header gets as far as the missing scan data.
	_, _, err = Decode(jpegHeaderOnly(64, 48, 3), 0)
	wantInputError(t, err, engine.CodeBadImage, "jpeg")
}

func TestJPEGUnsupportedLayouts(t *testing.T) {
	_, _, err := Decode(jpegHeaderOnly(16, 16, 2), 0)
	wantInputError(t, err, engine.CodeBadImage, "2 components")
	twelve := jpegHeaderOnly(16, 16, 1)
	twelve[6] = 12 // SOF precision
	_, _, err = Decode(twelve, 0)
	wantInputError(t, err, engine.CodeBadImage, "jpeg")
}

// TestJPEGTruncatedOrCorrupt: whatever the damage, an InputError naming JPEG and never a
// crash; a file cut short is refused as PIL refuses it ("image file is truncated"), and so
// is one whose scan data ends early at a marker (PIL would decode a grey tail).
func TestJPEGTruncatedOrCorrupt(t *testing.T) {
	for _, name := range []string{"ycc420.jpg", "progressive.jpg", "restart.jpg", "gray.jpg", "ycck.jpg", "arith.jpg"} {
		data := mustRead(t, name)
		if _, _, err := Decode(data, 0); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cuts := map[string][]byte{
			"no EOI":         data[:len(data)-2],
			"cut by 1":       data[:len(data)-1],
			"half":           data[:len(data)/2],
			"half + EOI":     append(append([]byte(nil), data[:len(data)/2]...), 0xFF, 0xD9),
			"header only":    data[:200],
			"three bytes":    data[:3],
			"just the SOI":   append(data[:2:2], 0xFF),
			"scan garbled":   garble(data, len(data)/3, 64),
			"header garbled": garble(data, 20, 40),
		}
		for what, bad := range cuts {
			img, _, err := Decode(bad, 0)
			if err == nil {
				if what == "scan garbled" || what == "header garbled" {
					continue // libjpeg may resync, with a warning PIL ignores too
				}
				if what == "half + EOI" && name == "arith.jpg" {
					// In arithmetic coding a marker inside the scan data is legal: libjpeg
					// pads with zeros without a warning, so the cut cannot be seen (PIL
					// decodes it the same way).
					continue
				}
				t.Errorf("%s %s: decoded %v, want an error", name, what, img.Bounds())
				continue
			}
			wantInputError(t, err, engine.CodeBadImage, "jpeg")
		}
	}
}

// garble overwrites n bytes from off with a pattern that is not a valid marker sequence.
func garble(data []byte, off, n int) []byte {
	out := bytes.Clone(data)
	for i := off; i < off+n && i < len(out); i++ {
		out[i] = byte(i*37) | 0x01
	}
	return out
}

// TestJPEGTrailingDataAccepted: bytes after the EOI are ignored, as by PIL.
func TestJPEGTrailingDataAccepted(t *testing.T) {
	data := append(mustRead(t, "ycc420.jpg"), []byte("trailing bytes")...)
	if _, _, err := Decode(data, 0); err != nil {
		t.Fatal(err)
	}
}

// TestJPEGErrorDoesNotQuoteInput: libjpeg's messages carry values read from the file
// (marker codes, counts); only their templates may reach an error message.
func TestJPEGErrorDoesNotQuoteInput(t *testing.T) {
	data := jpegHeaderOnly(16, 16, 3)
	data = append(data[:2:2], 0xFF, 0x4B, 0x00, 0x04, 0xAB, 0xCD) // an unknown marker 0x4b
	_, _, err := Decode(data, 0)
	wantInputError(t, err, engine.CodeBadImage, "jpeg")
	for _, leak := range []string{"4b", "4B", "ab", "AB", "cd", "CD", "171", "205"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("message %q quotes the input (%q)", err, leak)
		}
	}
}

// TestJPEGTooManyScans: a progressive file that repeats a scan thousands of times (each
// one a pass over every coefficient) is refused once it passes libjpeg.MaxScans.
func TestJPEGTooManyScans(t *testing.T) {
	data := mustRead(t, "progressive.jpg")
	last := bytes.LastIndex(data, []byte{0xFF, 0xDA})
	end := len(data) - 2 // the EOI
	if last < 0 || !bytes.Equal(data[end:], []byte{0xFF, 0xD9}) {
		t.Fatal("progressive.jpg: no last scan before its EOI")
	}
	scan := data[last:end]
	var b bytes.Buffer
	b.Write(data[:end])
	for range 1100 {
		b.Write(scan)
	}
	b.Write([]byte{0xFF, 0xD9})
	_, _, err := Decode(b.Bytes(), 0)
	wantInputError(t, err, engine.CodeBadImage, "jpeg", "progressive scans")
}
