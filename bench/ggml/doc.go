// Package ggml holds the side-by-side benchmark of the CPU engine against the ggml port
// of LocateAnything (locate-anything.cpp): compare.sh, its C++ stage driver la_stages.cpp,
// summarize.py and the Python stand-ins in pyshim/ (README.md says what each does). It
// has no Go code; its tests check the script without building or running either engine
// on the 3B model.
package ggml
