package libjpeg

/*
#cgo LDFLAGS: -ljpeg
#include <stdlib.h>
#include "encode.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"math"
	"unsafe"
)

// Subsampling is the resolution the encoder keeps of the two chroma planes.
type Subsampling int

const (
	// Chroma444 keeps chroma at full resolution: thin coloured lines keep their colour.
	Chroma444 Subsampling = iota
	// Chroma420 halves chroma both ways (libjpeg's default, what cameras write).
	Chroma420
)

func (s Subsampling) String() string {
	switch s {
	case Chroma444:
		return "4:4:4"
	case Chroma420:
		return "4:2:0"
	}
	return fmt.Sprintf("subsampling %d", int(s))
}

// EncodeOptions are the settings of Encode.
type EncodeOptions struct {
	Quality     int // 1..100, libjpeg's quality scale (the IJG tables, scaled; baseline)
	Subsampling Subsampling
	Optimize    bool // optimised Huffman tables: smaller, one more pass over the coefficients
	Progressive bool // libjpeg's simple progression script (implies optimised tables)
}

// Encode compresses a width x height image whose rows are stride bytes apart in pix, each
// pixel bytesPerPixel bytes: 3 is RGB, 4 is RGBX (the fourth byte, alpha say, ignored).
// The result is a baseline (or progressive) JFIF file with the accurate integer DCT.
// libjpeg's errors (an image over its 65500-pixel side, say) come back as *Error.
func Encode(pix []byte, stride, width, height, bytesPerPixel int, o EncodeOptions) ([]byte, error) {
	if bytesPerPixel != 3 && bytesPerPixel != 4 {
		return nil, &Error{Msg: fmt.Sprintf("%d bytes per pixel (3, RGB, or 4, RGBX, can be encoded)", bytesPerPixel)}
	}
	if o.Quality < 1 || o.Quality > 100 {
		return nil, &Error{Msg: fmt.Sprintf("quality %d is not in 1..100", o.Quality)}
	}
	if o.Subsampling != Chroma444 && o.Subsampling != Chroma420 {
		return nil, &Error{Msg: o.Subsampling.String() + " is not supported"}
	}
	if width <= 0 || height <= 0 || width > math.MaxInt32 || height > math.MaxInt32 ||
		stride < bytesPerPixel*width || len(pix) < stride*(height-1)+bytesPerPixel*width {
		return nil, &Error{Msg: "input buffer does not fit the image"}
	}
	copts := C.la_jpeg_encode_opts{quality: C.int(o.Quality)}
	if o.Subsampling == Chroma420 {
		copts.subsample = 1
	}
	if o.Optimize {
		copts.optimize = 1
	}
	if o.Progressive {
		copts.progressive = 1
	}
	var (
		info C.la_jpeg_info
		out  *C.uchar
		n    C.size_t
	)
	rc := C.la_jpeg_encode((*C.uchar)(unsafe.Pointer(&pix[0])), C.size_t(stride), C.int(width), C.int(height),
		C.int(bytesPerPixel), &copts, &out, &n, &info)
	if rc != C.LA_JPEG_OK {
		return nil, newError(rc, &info)
	}
	defer C.free(unsafe.Pointer(out))
	return bytes.Clone(unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n))), nil
}
