// Package overlay draws a prediction on the original image: one box per detection in a
// colour chosen by its label, the label on a filled tag, a marker per point. It works on a
// copy; the caller's image is never written. Encoder turns the result into PNG quickly, or
// into JPEG (Format, EncodeJPEG) where storage costs more than a lossless picture is worth.
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
	stroke  int     // box line width, 2 or 3 px
	fontPx  float64 // text height
	padding int     // around the text in a tag
	radius  int     // point marker
}

func styleFor(b image.Rectangle) style {
	short := min(b.Dx(), b.Dy())
	s := style{stroke: 2, fontPx: 12, padding: 2}
	if short >= 720 {
		s.stroke = 3
	}
	s.fontPx = math.Min(math.Max(float64(short)/45, 12), 32)
	s.padding = max(2, int(s.fontPx/6))
	s.radius = 2*s.stroke + 2
	return s
}

// Draw copies img and draws the detections and points on the copy, in original-image
// pixels. Boxes are clipped to the image; a box or point with a non-finite coordinate, or
// one entirely outside the image, is not drawn. With no detections and no points the
// result equals the original pixel for pixel. A nil image gives an empty one.
func Draw(img image.Image, dets []engine.Detection, pts []engine.Point) *image.RGBA {
	if img == nil {
		return image.NewRGBA(image.Rectangle{}) // EncodePNG refuses it with an error
	}
	b := img.Bounds()
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Bounds(), img, b.Min, draw.Src)
	if len(dets) == 0 && len(pts) == 0 {
		return dst
	}
	st := styleFor(dst.Bounds())
	face := newFace(st.fontPx)
	if face != nil {
		defer face.Close()
	}
	// Boxes first, then every tag on top, so that no box line crosses a label.
	type tag struct {
		label  string
		anchor image.Rectangle
	}
	var tags []tag
	for _, d := range dets {
		r, ok := boxRect(d.Box, dst.Bounds())
		if !ok {
			continue
		}
		strokeRect(dst, r, st.stroke, LabelColor(d.Label))
		tags = append(tags, tag{d.Label, r})
	}
	for _, p := range pts {
		c, ok := pointAt(p.Point, dst.Bounds())
		if !ok {
			continue
		}
		marker(dst, c, st.radius, LabelColor(p.Label))
		tags = append(tags, tag{p.Label, image.Rect(c.X-st.radius, c.Y-st.radius, c.X+st.radius+1, c.Y+st.radius+1)})
	}
	if face == nil {
		return dst
	}
	for _, t := range tags {
		drawTag(dst, face, st, t.label, t.anchor)
	}
	return dst
}

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

// tagRect is where a label's tag goes: on top of the anchor's top-left corner, or just
// inside it when there is no room above; shifted left to stay inside the image.
func tagRect(face font.Face, st style, label string, anchor, bounds image.Rectangle) image.Rectangle {
	m := face.Metrics()
	textW := font.MeasureString(face, label).Ceil()
	h := (m.Ascent + m.Descent).Ceil() + 2*st.padding
	w := textW + 2*st.padding
	x := min(anchor.Min.X, bounds.Max.X-w)
	x = max(x, bounds.Min.X)
	y := anchor.Min.Y - h
	if y < bounds.Min.Y {
		y = anchor.Min.Y
	}
	return image.Rect(x, y, x+w, y+h)
}

func drawTag(dst *image.RGBA, face font.Face, st style, label string, anchor image.Rectangle) {
	col := LabelColor(label)
	label = shorten(label)
	if label == "" {
		return
	}
	r := tagRect(face, st, label, anchor, dst.Bounds())
	fill(dst, r, col)
	d := font.Drawer{
		Dst:  dst,
		Src:  image.NewUniform(textColor(col)),
		Face: face,
		Dot:  fixed.P(r.Min.X+st.padding, r.Min.Y+st.padding+face.Metrics().Ascent.Ceil()),
	}
	d.DrawString(label)
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
