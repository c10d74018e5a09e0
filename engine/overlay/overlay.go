// Package overlay draws a prediction on the original image: one box per detection in a
// colour chosen by its label, its label and score on a tag placed clear of the others
// (layout.go), a marker per point. It works on a copy; the caller's image is never
// written. Encoder turns the result into PNG quickly, or into JPEG (Format, EncodeJPEG)
// where storage costs more than a lossless picture is worth.
package overlay

import (
	"hash/fnv"
	"image"
	"image/color"
	"image/draw"
	"math"
	"sync"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"

	"github.com/locateanything/detect/engine"
)

// palette is a fixed set of colours that stay apart from each other and from typical
// photo content (Kelly's maximum-contrast set, minus the near-white and near-black).
var palette = [...]color.RGBA{
	{230, 25, 75, 255},   // red
	{60, 180, 75, 255},   // green
	{255, 225, 25, 255},  // yellow
	{0, 130, 200, 255},   // blue
	{245, 130, 48, 255},  // orange
	{145, 30, 180, 255},  // purple
	{70, 240, 240, 255},  // cyan
	{240, 50, 230, 255},  // magenta
	{210, 245, 60, 255},  // lime
	{250, 190, 212, 255}, // pink
	{0, 128, 128, 255},   // teal
	{220, 190, 255, 255}, // lavender
	{170, 110, 40, 255},  // brown
	{128, 0, 0, 255},     // maroon
	{170, 255, 195, 255}, // mint
	{128, 128, 0, 255},   // olive
	{0, 0, 128, 255},     // navy
}

// LabelColor is the colour a label is drawn in: a hash of the label picks a palette entry,
// so the same label has the same colour in every image and every process.
func LabelColor(label string) color.RGBA {
	h := fnv.New32a()
	h.Write([]byte(label))
	return palette[h.Sum32()%uint32(len(palette))]
}

// textColor is black or white, whichever reads better on fill.
func textColor(fill color.RGBA) color.RGBA {
	luma := 299*int(fill.R) + 587*int(fill.G) + 114*int(fill.B)
	if luma > 140_000 {
		return color.RGBA{0, 0, 0, 255}
	}
	return color.RGBA{255, 255, 255, 255}
}

// The label font is parsed once; a parsed font is immutable and safe to share, while each
// Draw makes its own face (faces keep scratch buffers).
var boldFont = sync.OnceValues(func() (*opentype.Font, error) { return opentype.Parse(gobold.TTF) })

// maxLabelRunes keeps a runaway label from covering the picture.
const maxLabelRunes = 48

// style is the size of everything, scaled to the image.
type style struct {
	stroke int     // box line width, 2 or 3 px
	fontPx float64 // text height, before any shrinking to fit (layout.go)
	radius int     // point marker
}

func styleFor(b image.Rectangle) style {
	short := min(b.Dx(), b.Dy())
	s := style{stroke: 2}
	if short >= 720 {
		s.stroke = 3
	}
	s.fontPx = math.Min(math.Max(float64(short)/45, 12), 32)
	s.radius = 2*s.stroke + 2
	return s
}

// Options are what Draw adds to a picture besides the answer.
type Options struct {
	// Simulated marks a simulated answer (LA_ENGINE=sim: made-up boxes at the chip's speed,
	// docs/sim.md): a band along the bottom of the picture reads SIMULATED, so that the
	// picture is not taken for the model's answer.
	Simulated bool
}

// Draw copies img and draws the detections and points on the copy, in original-image
// pixels (Options{}.Draw).
func Draw(img image.Image, dets []engine.Detection, pts []engine.Point) *image.RGBA {
	return Options{}.Draw(img, dets, pts)
}

// Draw copies img and draws the detections and points on the copy, in original-image
// pixels: each box in its label's colour, each point as a marker, and beside each a tag
// with its label and score, placed by layout (layout.go) so that no two tags overlap and
// none leaves the picture. Where the tags do not fit (a crowded or a small picture), the
// boxes get numbers and a legend goes in a margin added below the picture: the result is
// then taller than img, as wide, with the picture at its top; otherwise it is img's size.
// Boxes are clipped to the image; a box or point with a non-finite coordinate, or one
// entirely outside the image, is not drawn. With no detections, no points and no band the
// result equals the original pixel for pixel. A nil image gives an empty one.
func (o Options) Draw(img image.Image, dets []engine.Detection, pts []engine.Point) *image.RGBA {
	if img == nil {
		return image.NewRGBA(image.Rectangle{}) // EncodePNG refuses it with an error
	}
	b := img.Bounds()
	pic := image.Rect(0, 0, b.Dx(), b.Dy())
	if len(dets) == 0 && len(pts) == 0 && !o.Simulated {
		dst := image.NewRGBA(pic)
		draw.Draw(dst, pic, img, b.Min, draw.Src)
		return dst
	}
	st := styleFor(pic)
	// Where each mark and its tag go is known before anything is drawn, so the canvas is
	// made once, with the legend's margin when the layout needs one.
	var items []item
	var boxes []image.Rectangle
	for _, d := range dets {
		r, ok := boxRect(d.Box, pic)
		if !ok {
			continue
		}
		boxes = append(boxes, r)
		items = append(items, item{text: tagText(d.Label, d.Score), label: d.Label, score: d.Score, anchor: r})
	}
	var centers []image.Point
	for _, p := range pts {
		c, ok := pointAt(p.Point, pic)
		if !ok {
			continue
		}
		centers = append(centers, c)
		anchor := image.Rect(c.X-st.radius, c.Y-st.radius, c.X+st.radius+1, c.Y+st.radius+1).Intersect(pic)
		items = append(items, item{text: tagText(p.Label, p.Score), label: p.Label, score: p.Score, anchor: anchor})
	}
	area := pic
	var band bandPlan
	if o.Simulated {
		band = planBand(area, st.fontPx)
		area.Max.Y = band.rect.Min.Y
	}
	p := layout(pic, area, st.fontPx, items, nil)

	dst := image.NewRGBA(image.Rect(0, 0, pic.Dx(), pic.Dy()+p.margin))
	draw.Draw(dst, pic, img, b.Min, draw.Src)
	if p.margin > 0 {
		fill(dst, image.Rect(0, pic.Max.Y, pic.Max.X, pic.Max.Y+p.margin), marginColor)
	}
	// Boxes first, then every piece of text on top, so that no box line crosses a label.
	for i, r := range boxes {
		strokeRect(dst, r, st.stroke, LabelColor(items[i].label))
	}
	for i, c := range centers {
		marker(dst, c, st.radius, LabelColor(items[len(boxes)+i].label))
	}
	drawPlan(dst, p)
	drawBand(dst, band)
	return dst
}

// marginColor is the background of the legend's margin: near-black, for white text.
var marginColor = color.RGBA{24, 24, 24, 255}

func newFace(px float64) font.Face {
	f, err := boldFont()
	if err != nil {
		return nil // the embedded font always parses; boxes are still drawn if not
	}
	face, err := opentype.NewFace(f, &opentype.FaceOptions{Size: px, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		return nil
	}
	return face
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// boxRect turns x1, y1, x2, y2 (any order) into the pixel rectangle it covers, clipped.
func boxRect(box [4]float64, bounds image.Rectangle) (image.Rectangle, bool) {
	if !finite(box[:]...) {
		return image.Rectangle{}, false
	}
	// Clamp before converting so that huge values cannot overflow int.
	lim := float64(max(bounds.Dx(), bounds.Dy()) + 1)
	c := func(v float64) int { return int(math.Round(math.Min(math.Max(v, -1), lim))) }
	r := image.Rect(c(box[0]), c(box[1]), c(box[2]), c(box[3])).Intersect(bounds)
	return r, !r.Empty()
}

func pointAt(p [2]float64, bounds image.Rectangle) (image.Point, bool) {
	if !finite(p[:]...) {
		return image.Point{}, false
	}
	pt := image.Pt(int(math.Floor(p[0])), int(math.Floor(p[1])))
	return pt, pt.In(bounds)
}

// strokeRect draws the outline of r, w pixels wide, inside r.
func strokeRect(dst *image.RGBA, r image.Rectangle, w int, c color.RGBA) {
	w = min(w, (r.Dx()+1)/2, (r.Dy()+1)/2)
	fill(dst, image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+w), c)
	fill(dst, image.Rect(r.Min.X, r.Max.Y-w, r.Max.X, r.Max.Y), c)
	fill(dst, image.Rect(r.Min.X, r.Min.Y, r.Min.X+w, r.Max.Y), c)
	fill(dst, image.Rect(r.Max.X-w, r.Min.Y, r.Max.X, r.Max.Y), c)
}

func fill(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(dst, r.Intersect(dst.Bounds()), image.NewUniform(c), image.Point{}, draw.Src)
}

// marker is a filled disc in the label colour with a one-pixel ring in the text colour,
// so that it stands out on any background.
func marker(dst *image.RGBA, c image.Point, r int, col color.RGBA) {
	ring := textColor(col)
	b := dst.Bounds()
	for y := c.Y - r - 1; y <= c.Y+r+1; y++ {
		for x := c.X - r - 1; x <= c.X+r+1; x++ {
			if !image.Pt(x, y).In(b) {
				continue
			}
			d2 := (x-c.X)*(x-c.X) + (y-c.Y)*(y-c.Y)
			switch {
			case d2 <= r*r:
				dst.SetRGBA(x, y, col)
			case d2 <= (r+1)*(r+1):
				dst.SetRGBA(x, y, ring)
			}
		}
	}
}

// shorten cuts a label to maxLabelRunes, marking the cut, and drops invalid UTF-8.
func shorten(label string) string {
	if !utf8.ValidString(label) {
		label = string([]rune(label)) // invalid bytes become U+FFFD
	}
	if utf8.RuneCountInString(label) <= maxLabelRunes {
		return label
	}
	return string([]rune(label)[:maxLabelRunes-1]) + "…"
}

// drawPlan draws the tags and the legend of p (on dst's margin, which Draw made).
func drawPlan(dst *image.RGBA, p plan) {
	if len(p.tags) > 0 {
		face := newFace(p.fontPx)
		if face == nil {
			return // the embedded font always parses; boxes are still drawn if not
		}
		m := metricsOf(face, p.fontPx)
		for _, t := range p.tags {
			col := LabelColor(t.label)
			fill(dst, t.rect, col)
			text(dst, m, t.text, t.rect.Min, textColor(col))
		}
		face.Close()
	}
	if len(p.legendLines) == 0 {
		return
	}
	face := newFace(p.legendPx)
	if face == nil {
		return
	}
	defer face.Close()
	m := metricsOf(face, p.legendPx)
	white := color.RGBA{255, 255, 255, 255}
	for i, l := range p.legendLines {
		y := p.legend.Min.Y + i*m.lineH
		if l.number != "" {
			col := LabelColor(l.label)
			sw := image.Rect(p.legend.Min.X, y, p.legend.Min.X+p.swatchW, y+m.lineH)
			fill(dst, sw, col)
			text(dst, m, l.number, sw.Min, textColor(col))
		}
		text(dst, m, l.text, image.Pt(p.legend.Min.X+p.swatchW, y), white)
	}
}

// text draws s with its tag's padding from top-left corner at.
func text(dst *image.RGBA, m metrics, s string, at image.Point, col color.RGBA) {
	d := font.Drawer{
		Dst:  dst,
		Src:  image.NewUniform(col),
		Face: m.face,
		Dot:  fixed.P(at.X+m.pad, at.Y+m.pad+m.ascent),
	}
	d.DrawString(s)
}

// shade darkens r: each pixel keeps (255-alpha)/255 of itself, so the picture shows through
// behind text drawn on it.
func shade(dst *image.RGBA, r image.Rectangle, alpha uint8) {
	draw.Draw(dst, r.Intersect(dst.Bounds()), image.NewUniform(color.RGBA{0, 0, 0, alpha}), image.Point{}, draw.Over)
}

// simulatedText is what the band of a simulated answer says, or simulatedShort where the
// picture is too narrow for it.
const simulatedText, simulatedShort = "SIMULATED", "SIM"

// bandPlan is the SIMULATED band: where it goes, and its text at which size (no text when
// even the short form does not fit).
type bandPlan struct {
	rect   image.Rectangle
	text   string
	fontPx float64
}

// planBand is a band along the bottom of b, as tall as its text, at the largest size at
// which SIMULATED (or SIM) fits the width.
func planBand(b image.Rectangle, startPx float64) bandPlan {
	for _, s := range []string{simulatedText, simulatedShort} {
		for _, px := range sizes(startPx) {
			bp, ok := withFace(px, func(m metrics) (bandPlan, bool) {
				fits := m.width(s) <= b.Dx() && m.lineH <= b.Dy()
				return bandPlan{rect: image.Rect(b.Min.X, b.Max.Y-m.lineH, b.Max.X, b.Max.Y), text: s, fontPx: px}, fits
			})
			if ok {
				return bp
			}
		}
	}
	h := min(b.Dy(), max(2, b.Dy()/8))
	return bandPlan{rect: image.Rect(b.Min.X, b.Max.Y-h, b.Max.X, b.Max.Y)}
}

// bandColor is the band's text: amber, the usual colour of a warning, on the darkened band.
var bandColor = color.RGBA{255, 193, 7, 255}

func drawBand(dst *image.RGBA, bp bandPlan) {
	if bp.rect.Empty() {
		return
	}
	shade(dst, bp.rect, 200)
	if bp.text == "" {
		return
	}
	face := newFace(bp.fontPx)
	if face == nil {
		return
	}
	defer face.Close()
	m := metricsOf(face, bp.fontPx)
	x := bp.rect.Min.X + (bp.rect.Dx()-m.width(bp.text))/2
	text(dst, m, bp.text, image.Pt(x, bp.rect.Min.Y), bandColor)
}
