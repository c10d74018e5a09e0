// Package libjpeg decodes JPEG through the system libjpeg-turbo (cgo, -ljpeg; Debian's
// libjpeg62-turbo-dev), the library PIL decodes JPEG with, so that the pixels come out
// identical to PIL's: the same IDCT (accurate integer, JDCT_ISLOW), the same fancy chroma
// upsampling and the same fixed-point YCbCr -> RGB, done by the same code. Encode
// compresses RGB or RGBX rows into a JFIF file with the same library (encode.c).
//
// libjpeg errors never end the process: its error_exit longjmps back into the C wrapper,
// which frees the decoder (or encoder) and reports. Warnings about a premature end of the
// data are errors too when decoding (ErrTruncated). Messages carry libjpeg's message
// template, never a value read from the file.
package libjpeg

/*
#cgo LDFLAGS: -ljpeg
#include <stdlib.h>
#include "decode.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"
)

// ColorSpace is how libjpeg reads the file's components (its J_COLOR_SPACE).
type ColorSpace int

// The colour spaces a JPEG can be stored in.
const (
	Unknown   ColorSpace = 0
	Grayscale ColorSpace = 1
	RGB       ColorSpace = 2
	YCbCr     ColorSpace = 3
	CMYK      ColorSpace = 4
	YCCK      ColorSpace = 5
)

func (c ColorSpace) String() string {
	switch c {
	case Grayscale:
		return "gray"
	case RGB:
		return "RGB"
	case YCbCr:
		return "YCbCr"
	case CMYK:
		return "CMYK"
	case YCCK:
		return "YCCK"
	}
	return fmt.Sprintf("colour space %d", int(c))
}

// Header is what a JPEG's header says.
type Header struct {
	Width, Height int
	Components    int        // 1, 3 or 4 can be decoded
	ColorSpace    ColorSpace // as libjpeg reads the file, from its JFIF / Adobe markers
	Progressive   bool
	Precision     int // bits per sample; libjpeg-turbo's 8-bit build decodes 8 only
}

// BytesPerPixel is the layout Decode writes for a header's component count: 1 (gray),
// 4 (RGBA with alpha 255, for 3 components) or 4 (CMYK), and 0 for anything else.
func (h Header) BytesPerPixel() int {
	switch h.Components {
	case 1:
		return 1
	case 3, 4:
		return 4
	}
	return 0
}

// MaxScans bounds the scans of a progressive JPEG: real files have about ten, and each
// scan costs a pass over the coefficients, so a file of thousands of tiny scans is a
// way to burn CPU. libjpeg itself has no limit.
const MaxScans = 1000

// Error is a failure reported by libjpeg or by the wrapper.
type Error struct {
	Code int    // libjpeg's message code, 0 when the wrapper itself refused
	Msg  string // libjpeg's message template with its parameters blanked out
	kind int
}

// ErrTruncated matches (errors.Is) an error caused by a premature end of the data.
var ErrTruncated = errors.New("premature end of the JPEG data")

func (e *Error) Error() string { return e.Msg }

// Is reports ErrTruncated for truncation.
func (e *Error) Is(target error) bool { return target == ErrTruncated && e.kind == C.LA_JPEG_TRUNCATED }

func newError(rc C.int, info *C.la_jpeg_info) error {
	e := &Error{Code: int(info.msg_code), kind: int(rc)}
	switch rc {
	case C.LA_JPEG_TOO_MANY_SCANS:
		e.Msg = fmt.Sprintf("more than %d progressive scans", MaxScans)
		return e
	case C.LA_JPEG_MISMATCH:
		e.Msg = "the header changed between two reads"
		return e
	}
	msg := blankParameters(C.GoString(&info.msg[0]))
	if msg == "" {
		msg = fmt.Sprintf("libjpeg message %d", e.Code)
	}
	if rc == C.LA_JPEG_TRUNCATED {
		msg = "truncated: " + msg
	}
	e.Msg = msg
	return e
}

// blankParameters replaces each printf directive of a libjpeg message template by "#":
// the values would come from the file, and an error message must not quote input.
func blankParameters(tmpl string) string {
	var b strings.Builder
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(tmpl) && tmpl[i+1] == '%' {
			b.WriteByte('%')
			i++
			continue
		}
		// Skip flags, width, precision and length up to the conversion letter.
		j := i + 1
		for j < len(tmpl) && strings.IndexByte("-+ #0123456789.lhz", tmpl[j]) >= 0 {
			j++
		}
		b.WriteByte('#')
		i = j // the conversion letter (or the end)
	}
	return b.String()
}

func headerOf(info *C.la_jpeg_info) Header {
	return Header{
		Width:       int(info.width),
		Height:      int(info.height),
		Components:  int(info.components),
		ColorSpace:  ColorSpace(info.color_space),
		Progressive: info.progressive != 0,
		Precision:   int(info.precision),
	}
}

// ReadHeader reads the header (through the first SOF and SOS markers) only.
func ReadHeader(data []byte) (Header, error) {
	if len(data) == 0 {
		return Header{}, &Error{Msg: "empty input"}
	}
	var info C.la_jpeg_info
	rc := C.la_jpeg_header((*C.uchar)(unsafe.Pointer(&data[0])), C.size_t(len(data)), &info)
	if rc != C.LA_JPEG_OK {
		return Header{}, newError(rc, &info)
	}
	return headerOf(&info), nil
}

// Decode decodes data, whose header ReadHeader returned as h, into pix: h.Height rows
// of stride bytes, each starting with h.Width pixels of h.BytesPerPixel() bytes: gray,
// RGBA (alpha 255) or CMYK exactly as libjpeg hands it over (Adobe files store CMYK
// inverted; libjpeg does not undo that, and neither does this package).
func Decode(data []byte, h Header, pix []byte, stride int) error {
	return DecodeContext(context.Background(), data, h, pix, stride)
}

// DecodeContext is Decode stopped by ctx: once ctx is done, libjpeg gives up at its next
// stripe of scanlines (or, while it reads a progressive file, its next row of blocks), and
// the error wraps ctx.Err().
func DecodeContext(ctx context.Context, data []byte, h Header, pix []byte, stride int) error {
	bpp := h.BytesPerPixel()
	if bpp == 0 {
		return &Error{Msg: fmt.Sprintf("%d components (1, 3 or 4 can be decoded)", h.Components)}
	}
	if len(data) == 0 || h.Width <= 0 || h.Height <= 0 || stride < bpp*h.Width ||
		len(pix) < stride*(h.Height-1)+bpp*h.Width {
		return &Error{Msg: "output buffer does not fit the image"}
	}
	// The flag is Go memory the C side only reads during the call; set after it, it is
	// simply never read.
	stop := new(int32)
	defer context.AfterFunc(ctx, func() { atomic.StoreInt32(stop, 1) })()
	var info C.la_jpeg_info
	rc := C.la_jpeg_decode((*C.uchar)(unsafe.Pointer(&data[0])), C.size_t(len(data)),
		(*C.uchar)(unsafe.Pointer(&pix[0])), C.size_t(stride),
		C.int(h.Width), C.int(h.Height), C.int(h.Components), C.int(MaxScans),
		(*C.int)(unsafe.Pointer(stop)), &info)
	if rc == C.LA_JPEG_CANCELED {
		return fmt.Errorf("jpeg decoding stopped: %w", ctx.Err())
	}
	if rc != C.LA_JPEG_OK {
		return newError(rc, &info)
	}
	return nil
}
