// Package answer turns LocateAnything's generated text into detections and points
// (docs/background.md, "Answer grammar"):
//
//	<ref>person</ref><box><12><40><300><990></box><box>...</box><ref>bus</ref><box>None</box><|im_end|>
//
// A box of four coordinates is a detection, a box of two is a point, both labelled by
// the latest <ref>. Coordinates are integers 0..1000 over the image the model saw, so
// they map onto the original image by v / 1000 * size whatever resizing happened.
//
// The parser is lenient, because the text comes from a model and may be cut short by the
// token budget: it ignores stray text, drops a box that is cut off or malformed, puts
// swapped corners in order, clamps values over 1000, and drops exact repeats (a model
// stuck in a loop repeats its last box).
package answer

import (
	"math"
	"strconv"
	"strings"

	"github.com/locateanything/detect/engine"
)

// The tags of the output grammar.
const (
	refStart = "<ref>"
	refEnd   = "</ref>"
	boxStart = "<box>"
	boxEnd   = "</box>"
	eos      = "<|im_end|>"
)

// MaxCoord is the largest coordinate value: coordinates are per mille of the image side.
const MaxCoord = 1000

// Parse reads the detections and points in raw, the decoded generated text, and maps
// them onto an original image of origW x origH pixels. It never fails: what it cannot
// read it skips. Both results are non-nil, so they encode as [] in JSON.
func Parse(raw string, origW, origH int) (dets []engine.Detection, pts []engine.Point) {
	dets, pts = []engine.Detection{}, []engine.Point{}
	if i := strings.Index(raw, eos); i >= 0 {
		raw = raw[:i] // nothing after the end of the turn is part of the answer
	}
	w, h := float64(max(origW, 0)), float64(max(origH, 0))

	type boxKey struct {
		label string
		norm  [4]int
	}
	type pointKey struct {
		label string
		norm  [2]int
	}
	seenBoxes := map[boxKey]bool{}
	seenPoints := map[pointKey]bool{}

	label := ""
	for pos := 0; pos < len(raw); {
		switch {
		case strings.HasPrefix(raw[pos:], refStart):
			body, closed, next := element(raw, pos+len(refStart), refEnd)
			if !closed && next == len(raw) {
				return dets, pts // cut off inside the label
			}
			label = strings.TrimSpace(body)
			pos = next

		case strings.HasPrefix(raw[pos:], boxStart):
			body, closed, next := element(raw, pos+len(boxStart), boxEnd)
			pos = next
			if !closed {
				continue // cut off or interrupted: drop the partial box
			}
			coords, ok := coordinates(body)
			if !ok {
				continue // "None" (nothing found for this label) or malformed
			}
			switch len(coords) {
			case 4:
				norm := [4]int{
					min(coords[0], coords[2]), min(coords[1], coords[3]),
					max(coords[0], coords[2]), max(coords[1], coords[3]),
				}
				key := boxKey{label, norm}
				if seenBoxes[key] {
					continue
				}
				seenBoxes[key] = true
				dets = append(dets, engine.Detection{
					Label:   label,
					Box:     [4]float64{pixel(norm[0], w), pixel(norm[1], h), pixel(norm[2], w), pixel(norm[3], h)},
					BoxNorm: norm,
				})
			case 2:
				norm := [2]int{coords[0], coords[1]}
				key := pointKey{label, norm}
				if seenPoints[key] {
					continue
				}
				seenPoints[key] = true
				pts = append(pts, engine.Point{
					Label:     label,
					Point:     [2]float64{pixel(norm[0], w), pixel(norm[1], h)},
					PointNorm: norm,
				})
			}

		default:
			pos++ // stray text
		}
	}
	return dets, pts
}

// element reads the body of a <ref> or <box> that starts at raw[from:]. The body ends at
// the closing tag (closed = true, next is after it) or, when the element is broken off,
// at the next opening tag or the end of the text (closed = false, next is there). It
// reads no further than that end, so a text of many broken elements parses in linear time.
func element(raw string, from int, closing string) (body string, closed bool, next int) {
	rest := raw[from:]
	for end := 0; end < len(rest); end++ {
		i := strings.IndexByte(rest[end:], '<')
		if i < 0 {
			break
		}
		end += i
		switch tail := rest[end:]; {
		case strings.HasPrefix(tail, closing):
			return rest[:end], true, from + end + len(closing)
		case strings.HasPrefix(tail, refStart), strings.HasPrefix(tail, boxStart):
			return rest[:end], false, from + end
		}
	}
	return rest, false, len(raw)
}

// coordinates reads a box body of coordinate tokens such as "<282><414>", allowing
// whitespace between them, with values over MaxCoord clamped. It reports false for
// anything else, "None" included.
func coordinates(body string) ([]int, bool) {
	var coords []int
	rest := strings.TrimSpace(body)
	for rest != "" {
		if rest[0] != '<' {
			return nil, false
		}
		end := strings.IndexByte(rest, '>')
		if end < 2 {
			return nil, false
		}
		digits := rest[1:end]
		for i := 0; i < len(digits); i++ {
			if digits[i] < '0' || digits[i] > '9' {
				return nil, false
			}
		}
		v, err := strconv.Atoi(digits)
		if err != nil || v > MaxCoord {
			v = MaxCoord // only an overflow fails Atoi once the digits are checked
		}
		coords = append(coords, v)
		rest = strings.TrimLeft(rest[end+1:], " \t\r\n")
	}
	return coords, len(coords) > 0
}

// pixel maps a coordinate onto a side of size pixels, rounded to 2 decimals. The min
// keeps float rounding on an absurd size from ever landing outside the image.
func pixel(v int, size float64) float64 {
	return min(math.Round(float64(v)/MaxCoord*size*100)/100, size)
}
