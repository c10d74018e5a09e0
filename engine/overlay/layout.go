package overlay

import (
	"cmp"
	"fmt"
	"image"
	"math"
	"slices"
	"strings"

	"golang.org/x/image/font"
)

// This file decides where the text of an overlay goes, before anything is drawn: each
// answer's tag (its label and score) beside its box or point, without two tags overlapping
// and all of them inside the picture. When the tags do not fit at the image's font size,
// smaller sizes are tried down to minFontPx; when they do not fit even then (a crowded or a
// small picture), each box gets a small numbered tag and a legend lists the numbers with
// their labels and scores, wrapped to the picture's width, in a margin added below the
// picture: the overlay is then taller than the image (as wide, the picture at its top), and
// the legend hides none of it. No text is ever cut.

// minFontPx is the smallest text drawn: Go Bold stays legible down to about this size.
const minFontPx = 8

// shrinkStep is how much smaller each next try of the font size is.
const shrinkStep = 0.85

// item is one answer to label: the text of its tag and the rectangle it labels.
type item struct {
	text   string
	label  string // picks the colour
	score  float64
	anchor image.Rectangle
}

// tagText is what an answer's tag says: its label and, when the engine gave one, its score.
func tagText(label string, score float64) string {
	label = shorten(label)
	if score > 0 && !math.IsNaN(score) && !math.IsInf(score, 0) {
		return fmt.Sprintf("%s %.2f", label, math.Min(score, 1))
	}
	return label
}

// placed is one piece of text and the rectangle it is drawn on (the text inset by pad).
type placed struct {
	text  string
	label string
	rect  image.Rectangle
}

// legendLine is one line of the legend: the number swatch on an entry's first line, its
// text (after the swatch's width on every line).
type legendLine struct {
	number string // "" on continuation lines
	label  string
	text   string
}

// plan is the text of one overlay, all in pixels of the overlay (the picture at 0,0).
type plan struct {
	fontPx float64
	tags   []placed // one per answer, or numbered ones in legend mode
	// legend, when not empty, lists numbered answers (lines drawn from its top-left, text
	// of legendPx) in the margin below the picture: as wide as the picture, margin pixels
	// tall, added to the overlay.
	legend      image.Rectangle
	legendLines []legendLine
	legendPx    float64
	swatchW     int // the width the number swatches take in the legend
	margin      int
}

// metrics are the sizes of text at one font size.
type metrics struct {
	face   font.Face
	pad    int
	lineH  int // a tag's height: text height + 2 pad
	ascent int
}

func metricsOf(face font.Face, px float64) metrics {
	m := face.Metrics()
	pad := max(1, int(px/6))
	return metrics{face: face, pad: pad, lineH: (m.Ascent + m.Descent).Ceil() + 2*pad, ascent: m.Ascent.Ceil()}
}

func (m metrics) width(text string) int { return font.MeasureString(m.face, text).Ceil() + 2*m.pad }

// sizes are the font sizes to try, largest first.
func sizes(start float64) []float64 {
	var out []float64
	for px := start; ; px *= shrinkStep {
		if px <= minFontPx {
			return append(out, minFontPx)
		}
		out = append(out, px)
	}
}

// layout places the tags of items inside area, a part of the picture pic, keeping clear
// of the obstacles; a legend goes below pic. The faces it makes are closed before it
// returns.
func layout(pic, area image.Rectangle, startPx float64, items []item, obstacles []image.Rectangle) plan {
	if len(items) == 0 || area.Empty() {
		return plan{}
	}
	for _, px := range sizes(startPx) {
		p, ok := withFace(px, func(m metrics) (plan, bool) {
			tags, ok := placeTags(area, m, items, func(it item) string { return it.text }, obstacles, false)
			return plan{fontPx: px, tags: tags}, ok
		})
		if ok {
			return p
		}
	}
	return legendLayout(pic, area, startPx, items, obstacles)
}

// withFace runs f with the metrics of a face of px pixels, and closes the face.
func withFace[T any](px float64, f func(metrics) (T, bool)) (T, bool) {
	face := newFace(px)
	if face == nil {
		var zero T
		return zero, false
	}
	defer face.Close()
	return f(metricsOf(face, px))
}

// placeTags puts each item's tag (text(item)) beside its anchor: items with the higher
// score choose first, each the first of its candidate spots that overlaps no tag placed
// before and no obstacle, preferring spots that hide less of the answers' boxes. It
// fails when a tag has no such spot, unless skip is set, when that tag is left out.
func placeTags(area image.Rectangle, m metrics, items []item, text func(item) string, obstacles []image.Rectangle, skip bool) ([]placed, bool) {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(items[b].score, items[a].score) })
	taken := slices.Clone(obstacles)
	out := make([]placed, 0, len(items))
	for _, i := range order {
		it := items[i]
		t := text(it)
		w, h := m.width(t), m.lineH
		if w > area.Dx() || h > area.Dy() {
			if skip {
				continue
			}
			return nil, false
		}
		best, bestCost := image.Rectangle{}, math.MaxInt
		for _, r := range candidates(it.anchor, w, h, area) {
			if overlapsAny(r, taken) {
				continue
			}
			// what the tag would hide: of the other answers, and of its own (a tag pushed
			// inside its box by the picture's edge goes outside it where there is room)
			cost := 0
			for _, other := range items {
				cost += area2(r.Intersect(other.anchor))
			}
			if cost < bestCost {
				best, bestCost = r, cost
			}
		}
		if bestCost == math.MaxInt {
			if skip {
				continue
			}
			return nil, false
		}
		taken = append(taken, best)
		out = append(out, placed{text: t, label: it.label, rect: best})
	}
	return out, true
}

// candidates are the spots for a w x h tag of anchor, in order of preference: on top of the
// box's top-left corner (where detection overlays usually put it), its top-right, below its
// bottom-left and bottom-right, then inside its four corners; each moved into area.
func candidates(a image.Rectangle, w, h int, area image.Rectangle) []image.Rectangle {
	spots := []image.Point{
		{a.Min.X, a.Min.Y - h}, {a.Max.X - w, a.Min.Y - h},
		{a.Min.X, a.Max.Y}, {a.Max.X - w, a.Max.Y},
		{a.Min.X, a.Min.Y}, {a.Max.X - w, a.Min.Y},
		{a.Min.X, a.Max.Y - h}, {a.Max.X - w, a.Max.Y - h},
	}
	out := make([]image.Rectangle, 0, len(spots))
	for _, p := range spots {
		x := min(max(p.X, area.Min.X), area.Max.X-w)
		y := min(max(p.Y, area.Min.Y), area.Max.Y-h)
		r := image.Rect(x, y, x+w, y+h)
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func overlapsAny(r image.Rectangle, rs []image.Rectangle) bool {
	for _, o := range rs {
		if r.Overlaps(o) {
			return true
		}
	}
	return false
}

func area2(r image.Rectangle) int {
	if r.Empty() {
		return 0
	}
	return r.Dx() * r.Dy()
}

// legendLayout numbers the answers in reading order (top to bottom, then left to right),
// puts a small numbered tag beside each, at the largest size at which all of them fit
// area (at the smallest, a tag with no free spot is left out: every box keeps its colour,
// which the legend's swatches repeat), and lists the numbers with their labels and scores
// in a legend in a margin below pic, as wide as pic: at startPx, or smaller where that
// size would break a word between runes. A picture too narrow for any legend text gets no
// text at all.
func legendLayout(pic, area image.Rectangle, startPx float64, items []item, obstacles []image.Rectangle) plan {
	numbered := slices.Clone(items)
	slices.SortStableFunc(numbered, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.anchor.Min.Y, b.anchor.Min.Y), cmp.Compare(a.anchor.Min.X, b.anchor.Min.X))
	})
	for i := range numbered {
		numbered[i].text = fmt.Sprint(i + 1)
	}
	all := sizes(startPx)
	var p plan
	for k, px := range all {
		last := k == len(all)-1
		legend, ok := withFace(px, func(m metrics) (plan, bool) {
			lines, swatchW, whole := legendLines(m, numbered, pic.Dx())
			if len(lines) == 0 || (!whole && !last) {
				return plan{}, false
			}
			h := len(lines) * m.lineH
			return plan{legend: image.Rect(pic.Min.X, pic.Max.Y, pic.Max.X, pic.Max.Y+h), legendLines: lines,
				legendPx: px, swatchW: swatchW, margin: h}, true
		})
		if ok {
			p = legend
			break
		}
	}
	if len(p.legendLines) == 0 {
		return plan{}
	}
	for k, px := range all {
		last := k == len(all)-1
		tags, ok := withFace(px, func(m metrics) ([]placed, bool) {
			return placeTags(area, m, numbered, func(it item) string { return it.text }, obstacles, last)
		})
		if ok {
			p.fontPx, p.tags = px, tags
			break
		}
	}
	return p
}

// legendLines are the legend's lines for the numbered items, each entry's text wrapped at
// spaces (or, for one word too long, between runes) to width; with the swatch width, and
// whether every word kept whole. None when width has no room for text beside the swatch.
func legendLines(m metrics, numbered []item, width int) (lines []legendLine, swatchW int, whole bool) {
	swatchW = m.width(fmt.Sprint(len(numbered)))
	textW := width - swatchW - m.pad
	if textW < m.width("0") {
		return nil, 0, false
	}
	whole = true
	for _, it := range numbered {
		text := tagText(it.label, it.score)
		wrapped := wrap(m, text, textW)
		if strings.Join(wrapped, " ") != strings.Join(strings.Fields(text), " ") {
			whole = false // a word was broken between runes
		}
		for i, w := range wrapped {
			l := legendLine{label: it.label, text: w}
			if i == 0 {
				l.number = it.text
			}
			lines = append(lines, l)
		}
	}
	return lines, swatchW, whole
}

// wrap splits text into lines no wider than w (tag padding included), breaking at spaces
// and, inside a word longer than a line, between runes. No rune is dropped.
func wrap(m metrics, text string, w int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && m.width(line+" "+word) <= w {
			line += " " + word
			continue
		}
		if line != "" {
			lines = append(lines, line)
		}
		line = ""
		for _, r := range word {
			if line != "" && m.width(line+string(r)) > w {
				lines = append(lines, line)
				line = ""
			}
			line += string(r)
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
