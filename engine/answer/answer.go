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
//
// ParseScored also scores every box and point from the probabilities the model gave the
// tokens of its coordinates (Score, docs/scores.md).
package answer

import (
	"math"
	"slices"
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
// read it skips. Both results are non-nil, so they encode as [] in JSON. Without the
// tokens' probabilities every score is 0; ParseScored has them.
func Parse(raw string, origW, origH int) (dets []engine.Detection, pts []engine.Point) {
	return ParseScored(raw, nil, nil, origW, origH)
}

// ParseScored is Parse with a score on every box and point. raw is the text of the
// generated tokens back to back: token i is raw[ends[i-1]:ends[i]] (from 0 for the first,
// tokenizer.DecodeEnds), generated with probability probs[i]. A box's score is the
// geometric mean of the probabilities of the tokens that write its coordinates (those
// that overlap the text between <box> and </box>, whitespace-only tokens left out),
// rounded to 4 decimals: the per-token average of the model's log-probability of where
// the box is, so a box and a point compare on one scale (docs/scores.md says why and what
// it measured). When ends and probs do not describe raw (different lengths, ends not
// increasing or not ending at len(raw)) every score is 0, as in Parse.
func ParseScored(raw string, ends []int, probs []float32, origW, origH int) (dets []engine.Detection, pts []engine.Point) {
	dets, pts = []engine.Detection{}, []engine.Point{}
	sc := newScorer(raw, ends, probs)
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
			bodyStart := pos + len(boxStart)
			body, closed, next := element(raw, bodyStart, boxEnd)
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
					Score:   sc.score(bodyStart, bodyStart+len(body)),
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
					Score:     sc.score(bodyStart, bodyStart+len(body)),
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

// scorer lays the generated tokens' probabilities over the text.
type scorer struct {
	raw   string
	ends  []int
	probs []float32
}

// newScorer checks that ends and probs describe raw; when they do not, the scorer scores
// everything 0.
func newScorer(raw string, ends []int, probs []float32) scorer {
	if len(ends) == 0 || len(ends) != len(probs) || ends[len(ends)-1] != len(raw) {
		return scorer{}
	}
	prev := 0
	for _, e := range ends {
		if e < prev {
			return scorer{}
		}
		prev = e
	}
	return scorer{raw: raw, ends: ends, probs: probs}
}

// score is the geometric mean of the probabilities of the tokens that overlap raw[from:to],
// leaving out tokens of whitespace alone, rounded to 4 decimals; 0 when there are none.
func (s scorer) score(from, to int) float64 {
	if s.ends == nil {
		return 0
	}
	// The first token that ends after from: ends is sorted.
	i, _ := slices.BinarySearchFunc(s.ends, from, func(e, target int) int {
		if e <= target {
			return -1
		}
		return 1
	})
	logSum, n := 0.0, 0
	for ; i < len(s.ends); i++ {
		start := 0
		if i > 0 {
			start = s.ends[i-1]
		}
		if start >= to {
			break
		}
		if start == s.ends[i] || strings.TrimSpace(s.raw[start:s.ends[i]]) == "" {
			continue // an empty or whitespace token says nothing about where the box is
		}
		p := float64(s.probs[i])
		if !(p > 0) {
			return 0 // a token the model gave no chance (or NaN): no confidence in the box
		}
		logSum += math.Log(min(p, 1))
		n++
	}
	if n == 0 {
		return 0
	}
	return math.Round(math.Exp(logSum/float64(n))*1e4) / 1e4
}
