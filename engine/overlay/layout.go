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
// small picture), each box gets a small numbered tag and a legend in a corner lists the
// numbers with their labels and scores, wrapped to the picture's width. No text is ever cut.

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

// plan is the text of one overlay, all in pixels of the picture.
type plan struct {
	fontPx float64
	pad    int
	tags   []placed // one per answer, or numbered ones in legend mode
	// legend, when not empty, lists numbered answers: lines drawn from its top-left.
	legend      image.Rectangle
	legendLines []legendLine
	swatchW     int // the width the number swatches take in the legend
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

// layout places the tags of items inside area, keeping clear of the obstacles. The faces
// it makes are closed before it returns.
func layout(area image.Rectangle, startPx float64, items []item, obstacles []image.Rectangle) plan {
	if len(items) == 0 || area.Empty() {
		return plan{}
	}
	for _, px := range sizes(startPx) {
		p, ok := withFace(px, func(m metrics) (plan, bool) {
			tags, ok := placeTags(area, m, items, func(it item) string { return it.text }, obstacles, false)
			return plan{fontPx: px, pad: m.pad, tags: tags}, ok
		})
		if ok {
			return p
		}
	}
	return legendLayout(area, startPx, items, obstacles)
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
// puts a small numbered tag beside each and the legend in the corner that covers the
// fewest answers, at the largest size at which all of it fits. At the smallest size the
// legend keeps what fits of its entries and a numbered tag with no free spot is left out:
// every box keeps its colour, which the legend's swatches repeat.
func legendLayout(area image.Rectangle, startPx float64, items []item, obstacles []image.Rectangle) plan {
	numbered := slices.Clone(items)
	slices.SortStableFunc(numbered, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.anchor.Min.Y, b.anchor.Min.Y), cmp.Compare(a.anchor.Min.X, b.anchor.Min.X))
	})
	for i := range numbered {
		numbered[i].text = fmt.Sprint(i + 1)
	}
	all := sizes(startPx)
	for k, px := range all {
		last := k == len(all)-1
		p, ok := withFace(px, func(m metrics) (plan, bool) {
			lines, legendW, swatchW, complete := legendLines(m, numbered, area, last)
			if !complete {
				return plan{}, false
			}
			legend := legendCorner(area, legendW, len(lines)*m.lineH, numbered, obstacles)
			tags, ok := placeTags(area, m, numbered, func(it item) string { return it.text }, append(slices.Clone(obstacles), legend), last)
			return plan{fontPx: px, pad: m.pad, tags: tags, legend: legend, legendLines: lines, swatchW: swatchW}, ok
		})
		if ok {
			return p
		}
	}
	return plan{}
}

// legendLines are the legend's lines for the numbered items, each entry's text wrapped at
// spaces (or, for one word too long, between runes) to the area's width; with their widest
// width and the swatch width. Unless partial, it fails when the lines are taller than half
// the area (the picture must stay visible); partial keeps the entries that fit the area.
func legendLines(m metrics, numbered []item, area image.Rectangle, partial bool) (lines []legendLine, width, swatchW int, complete bool) {
	swatchW = m.width(fmt.Sprint(len(numbered)))
	textW := area.Dx() - swatchW - m.pad
	if textW < m.width("0") {
		return nil, 0, 0, false
	}
	maxLines := area.Dy() / 2 / m.lineH
	if partial {
		maxLines = area.Dy() / m.lineH
	}
	for _, it := range numbered {
		wrapped := wrap(m, tagText(it.label, it.score), textW)
		if len(lines)+len(wrapped) > maxLines {
			return lines, width, swatchW, partial && len(lines) > 0
		}
		for i, w := range wrapped {
			l := legendLine{label: it.label, text: w}
			if i == 0 {
				l.number = it.text
			}
			lines = append(lines, l)
			width = max(width, swatchW+m.width(w))
		}
	}
	return lines, width, swatchW, true
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

// legendCorner is the corner of area for a w x h legend that covers the least of the
// answers and the obstacles (top-right first on a tie: boxes tend to start top-left).
func legendCorner(area image.Rectangle, w, h int, items []item, obstacles []image.Rectangle) image.Rectangle {
	corners := []image.Rectangle{
		image.Rect(area.Max.X-w, area.Min.Y, area.Max.X, area.Min.Y+h),
		image.Rect(area.Max.X-w, area.Max.Y-h, area.Max.X, area.Max.Y),
		image.Rect(area.Min.X, area.Max.Y-h, area.Min.X+w, area.Max.Y),
		image.Rect(area.Min.X, area.Min.Y, area.Min.X+w, area.Min.Y+h),
	}
	best, bestCost := corners[0], math.MaxInt
	for _, c := range corners {
		cost := 0
		for _, it := range items {
			cost += area2(c.Intersect(it.anchor))
		}
		for _, o := range obstacles {
			cost += 1000 * area2(c.Intersect(o))
		}
		if cost < bestCost {
			best, bestCost = c, cost
		}
	}
	return best
}
