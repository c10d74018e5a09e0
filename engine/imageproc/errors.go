package imageproc

import "errors"

// The error kinds of package imageproc besides engine.InputError (what a bad image is
// answered with): the internal signals its decoders and resizers pass up.

// errNoFrame: a GIF whose blocks end before its first image descriptor.
var errNoFrame = errors.New("no image frame")

// errNotOpaque: a 4-byte plane holds a pixel whose alpha is not 255, which only ToRGB
// converts right (it blends onto white). The resize checks each row as it reads it,
// where the row is about to be in cache anyway.
var errNotOpaque = errors.New("image has alpha")
