package imageproc

import (
	"fmt"
	"strconv"
	"strings"
)

// The served deployment squashes every image onto one canonical grid, because the device
// graph is built once per grid. Two environment strings choose it:
//
//	LA_CANON_GRID   "native" (a grid per image), "HxW" in patches (e.g. "24x44"), or ""
//	                to derive it from LA_CANON_ASPECT
//	LA_CANON_ASPECT "WxH" in pixels, default "1920x1080": the grid a WxH image gets at
//	                the in_token_limit (1920x1080 at 1024 -> 616x336 px -> 24x44)

// DefaultCanonAspect is the aspect the canonical grid is derived from when none is set.
const DefaultCanonAspect = "1920x1080"

// ParseCanonGrid parses LA_CANON_GRID. "native" gives {0, 0}; "" gives ok = false (derive
// from the aspect); "HxW" gives {H, W}, both positive and even (the 2x2 patch merge)
// and below MaxGridSide.
func ParseCanonGrid(s string) (grid [2]int, ok bool, err error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return [2]int{}, false, nil
	case "native":
		return [2]int{}, true, nil
	}
	h, w, err := parsePair(s, "height", "width")
	if err != nil {
		return [2]int{}, false, fmt.Errorf("LA_CANON_GRID %q (want \"native\" or HxW in patches, e.g. 24x44): %w", s, err)
	}
	if err := checkGrid([2]int{h, w}, 2); err != nil {
		return [2]int{}, false, fmt.Errorf("LA_CANON_GRID %q: %w", s, err)
	}
	return [2]int{h, w}, true, nil
}

// ParseCanonAspect parses LA_CANON_ASPECT ("WxH" in pixels; "" = DefaultCanonAspect).
func ParseCanonAspect(s string) (w, h int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		s = DefaultCanonAspect
	}
	w, h, err = parsePair(s, "width", "height")
	if err != nil {
		return 0, 0, fmt.Errorf("LA_CANON_ASPECT %q (want WxH in pixels, e.g. 1920x1080): %w", s, err)
	}
	return w, h, nil
}

// ResolveCanonGrid turns the two environment strings into Options.CanonGrid for o's
// token limit and patch size.
func ResolveCanonGrid(gridEnv, aspectEnv string, o Options) ([2]int, error) {
	grid, ok, err := ParseCanonGrid(gridEnv)
	if err != nil || ok {
		return grid, err
	}
	w, h, err := ParseCanonAspect(aspectEnv)
	if err != nil {
		return [2]int{}, err
	}
	return CanonGridFor(w, h, o)
}

// CanonGridFor is the grid a w x h image gets under o's rescale: {h, w} in patches.
func CanonGridFor(w, h int, o Options) ([2]int, error) {
	tw, th, err := o.NativeSize(w, h)
	if err != nil {
		return [2]int{}, fmt.Errorf("canonical aspect %dx%d: %w", w, h, err)
	}
	return [2]int{th / o.PatchSize, tw / o.PatchSize}, nil
}

// parsePair parses "AxB" into two positive integers, naming the bad part in its error.
func parsePair(s, first, second string) (int, int, error) {
	a, b, found := strings.Cut(strings.ToLower(s), "x")
	if !found {
		return 0, 0, fmt.Errorf("no 'x' between %s and %s", first, second)
	}
	av, err := positive(a, first)
	if err != nil {
		return 0, 0, err
	}
	bv, err := positive(b, second)
	if err != nil {
		return 0, 0, err
	}
	return av, bv, nil
}

func positive(s, name string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%s %q is not a positive integer", name, s)
	}
	return v, nil
}
