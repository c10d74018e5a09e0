// Package shapes draws the tiny-shapes world in Go: coloured circles, squares, triangles and
// stars on varied backgrounds, with queries in LocateAnything's templates and the true
// boxes, and it scores detections against them. It follows tools/tinymodel/scenes.py (the
// world the model was trained on) closely enough for the model to see the same things; it
// does not reproduce that file's pixels or random stream, so Go and Python scenes of one
// seed differ. The demo (make demo) and the tests use it to make fresh scenes without
// Python.
package shapes

import (
	"image"
	"image/color"
	"math"
	"math/rand/v2"
	"slices"
)

// Colours are the five shape colours and their base RGB; each object jitters it by up to
// 20 per channel.
var Colours = []struct {
	Name string
	RGB  [3]int
}{
	{"red", [3]int{220, 40, 40}},
	{"green", [3]int{40, 170, 60}},
	{"blue", [3]int{40, 80, 220}},
	{"yellow", [3]int{240, 210, 40}},
	{"purple", [3]int{150, 60, 190}},
}

// Shapes are the four shape names.
var Shapes = []string{"circle", "square", "triangle", "star"}

// The world's limits, as in scenes.py.
const (
	minSide, maxSide     = 84, 360  // the longer image side, pixels
	minAspect, maxAspect = 0.5, 2.0 // width / height
	maxObjects           = 4
	minSize, maxSize     = 0.16, 0.45 // object side over the shorter image side
)

// Object is one drawn shape and its tight box (x1, y1, x2, y2) in pixels.
type Object struct {
	Shape  string
	Colour string
	Box    [4]float64
}

// Area is the box's area in square pixels.
func (o Object) Area() float64 { return (o.Box[2] - o.Box[0]) * (o.Box[3] - o.Box[1]) }

// Centre is the box's centre.
func (o Object) Centre() (x, y float64) { return (o.Box[0] + o.Box[2]) / 2, (o.Box[1] + o.Box[3]) / 2 }

// Scene is a picture and the objects on it, in drawing order (later ones on top).
type Scene struct {
	Image   *image.RGBA
	Objects []Object
}

// NewScene draws a random scene: a random size and aspect, a background, and 0-4 shapes.
// The same generator state gives the same scene.
func NewScene(r *rand.Rand) Scene {
	w, h := randomSize(r)
	img := background(r, w, h)
	n := []int{0, 1, 1, 2, 2, 3, 3, 4}[r.IntN(8)]
	short := float64(min(w, h))
	var objects []Object
	for range n {
		var (
			obj    Object
			x1, y1 float64
			s      float64
			placed bool
		)
		for range 30 {
			s = (minSize + r.Float64()*(maxSize-minSize)) * short
			x1, y1 = r.Float64()*(float64(w)-s), r.Float64()*(float64(h)-s)
			obj = Object{Shape: Shapes[r.IntN(len(Shapes))], Colour: Colours[r.IntN(len(Colours))].Name}
			obj.Box = tightBox(obj.Shape, x1, y1, s)
			if fitsAmong(obj, objects) {
				placed = true
				break
			}
		}
		if !placed {
			continue
		}
		fill := jitter(r, colourRGB(obj.Colour), 20)
		if obj.Shape == "circle" {
			fillCircle(img, x1+s/2, y1+s/2, s/2, fill)
		} else {
			fillPolygon(img, polygon(obj.Shape, x1, y1, s), fill)
		}
		objects = append(objects, obj)
	}
	return Scene{Image: img, Objects: objects}
}

// fitsAmong reports whether obj may join the scene: shapes of different colours overlap by
// less than a quarter of the smaller one, shapes of one colour not at all (they would melt
// into one blob).
func fitsAmong(obj Object, placed []Object) bool {
	for _, o := range placed {
		limit := 0.25
		if o.Colour == obj.Colour {
			limit = 1e-9
		}
		if overlapFraction(obj.Box, o.Box) >= limit {
			return false
		}
	}
	return true
}

func randomSize(r *rand.Rand) (w, h int) {
	aspect := math.Exp(math.Log(minAspect) + r.Float64()*(math.Log(maxAspect)-math.Log(minAspect)))
	longer := minSide + 40 + r.IntN(maxSide-minSide-40+1)
	if aspect >= 1 {
		return longer, max(minSide, int(math.Round(float64(longer)/aspect)))
	}
	return max(minSide, int(math.Round(float64(longer)*aspect))), longer
}

func colourRGB(name string) [3]int {
	for _, c := range Colours {
		if c.Name == name {
			return c.RGB
		}
	}
	panic("shapes: unknown colour " + name)
}

func jitter(r *rand.Rand, rgb [3]int, amount int) color.RGBA {
	var out [3]uint8
	for i, c := range rgb {
		out[i] = uint8(min(255, max(0, c-amount+r.IntN(2*amount+1))))
	}
	return color.RGBA{out[0], out[1], out[2], 255}
}

// background paints a muted background: flat, a gradient, stripes, checks or blocky noise,
// so that no one colour means "empty".
func background(r *rand.Rand, w, h int) *image.RGBA {
	var base [3]int
	for i := range base {
		base[i] = 70 + r.IntN(131)
	}
	grey := (base[0] + base[1] + base[2]) / 3
	for i := range base {
		base[i] = (base[i] + 2*grey) / 3 // desaturate: the shapes stay the vivid things
	}
	baseC := color.RGBA{uint8(base[0]), uint8(base[1]), uint8(base[2]), 255}
	other := jitter(r, base, 45)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fillRect(img, img.Bounds(), baseC)
	switch r.IntN(5) {
	case 1: // gradient
		vertical := r.IntN(2) == 0
		n := w
		if vertical {
			n = h
		}
		for i := range n {
			t := float64(i) / float64(max(1, n-1))
			c := color.RGBA{lerp(baseC.R, other.R, t), lerp(baseC.G, other.G, t), lerp(baseC.B, other.B, t), 255}
			if vertical {
				fillRect(img, image.Rect(0, i, w, i+1), c)
			} else {
				fillRect(img, image.Rect(i, 0, i+1, h), c)
			}
		}
	case 2: // diagonal stripes
		step := 6 + r.IntN(15)
		for i := -h; i < w+h; i += 2 * step {
			fi, fs, fh := float64(i), float64(step), float64(h)
			fillPolygon(img, [][2]float64{{fi, 0}, {fi + fs, 0}, {fi + fs + fh, fh}, {fi + fh, fh}}, other)
		}
	case 3: // checks
		step := 8 + r.IntN(17)
		for y := 0; y < h; y += step {
			for x := 0; x < w; x += step {
				if (x/step+y/step)%2 == 1 {
					fillRect(img, image.Rect(x, y, x+step, y+step), other)
				}
			}
		}
	case 4: // blocky noise: a small random picture enlarged by nearest neighbour
		sw, sh := max(1, w/6), max(1, h/6)
		cells := make([]color.RGBA, sw*sh)
		for i := range cells {
			cells[i] = jitter(r, base, 35)
		}
		for y := range h {
			for x := range w {
				img.SetRGBA(x, y, cells[min(sh-1, y*sh/h)*sw+min(sw-1, x*sw/w)])
			}
		}
	}
	return img
}

func lerp(a, b uint8, t float64) uint8 {
	return uint8(math.Round(float64(a) + (float64(b)-float64(a))*t))
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// polygon gives the outline of a square, triangle or star in the square box (x1, y1, x1+s,
// y1+s): the star has five points, its inner radius two fifths of the outer.
func polygon(shape string, x1, y1, s float64) [][2]float64 {
	switch shape {
	case "square":
		return [][2]float64{{x1, y1}, {x1 + s, y1}, {x1 + s, y1 + s}, {x1, y1 + s}}
	case "triangle":
		return [][2]float64{{x1 + s/2, y1}, {x1 + s, y1 + s}, {x1, y1 + s}}
	case "star":
		cx, cy := x1+s/2, y1+s/2
		pts := make([][2]float64, 10)
		for k := range pts {
			radius := s / 2
			if k%2 == 1 {
				radius = s / 5
			}
			a := -math.Pi/2 + float64(k)*math.Pi/5
			pts[k] = [2]float64{cx + radius*math.Cos(a), cy + radius*math.Sin(a)}
		}
		return pts
	}
	panic("shapes: no polygon for " + shape)
}

// tightBox is the extent of what is drawn: the whole square box for a circle, the
// outline's bounds for the others (a star is narrower than it is tall).
func tightBox(shape string, x1, y1, s float64) [4]float64 {
	if shape == "circle" {
		return [4]float64{x1, y1, x1 + s, y1 + s}
	}
	b := [4]float64{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
	for _, p := range polygon(shape, x1, y1, s) {
		b[0], b[1] = min(b[0], p[0]), min(b[1], p[1])
		b[2], b[3] = max(b[2], p[0]), max(b[3], p[1])
	}
	return b
}

// fillCircle paints the pixels whose centres lie inside the circle.
func fillCircle(img *image.RGBA, cx, cy, radius float64, c color.RGBA) {
	b := img.Bounds()
	for y := max(b.Min.Y, int(cy-radius)); y <= min(b.Max.Y-1, int(cy+radius)); y++ {
		for x := max(b.Min.X, int(cx-radius)); x <= min(b.Max.X-1, int(cx+radius)); x++ {
			dx, dy := float64(x)+0.5-cx, float64(y)+0.5-cy
			if dx*dx+dy*dy <= radius*radius {
				img.SetRGBA(x, y, c)
			}
		}
	}
}

// fillPolygon paints the pixels whose centres lie inside the polygon (even-odd rule), one
// scanline at a time: each row's crossings with the edges, sorted, bound the filled spans.
func fillPolygon(img *image.RGBA, pts [][2]float64, c color.RGBA) {
	b := img.Bounds()
	var xs []float64
	for y := b.Min.Y; y < b.Max.Y; y++ {
		fy := float64(y) + 0.5
		xs = xs[:0]
		for i := range pts {
			p, q := pts[i], pts[(i+1)%len(pts)]
			if (p[1] <= fy) == (q[1] <= fy) {
				continue // the edge does not cross this row
			}
			xs = append(xs, p[0]+(fy-p[1])/(q[1]-p[1])*(q[0]-p[0]))
		}
		slices.Sort(xs)
		for i := 0; i+1 < len(xs); i += 2 {
			from := max(b.Min.X, int(math.Ceil(xs[i]-0.5)))
			to := min(b.Max.X-1, int(math.Floor(xs[i+1]-0.5)))
			for x := from; x <= to; x++ {
				img.SetRGBA(x, y, c)
			}
		}
	}
}

// overlapFraction is the intersection of two boxes over the smaller one's area.
func overlapFraction(a, b [4]float64) float64 {
	iw := min(a[2], b[2]) - max(a[0], b[0])
	ih := min(a[3], b[3]) - max(a[1], b[1])
	if iw <= 0 || ih <= 0 {
		return 0
	}
	small := min((a[2]-a[0])*(a[3]-a[1]), (b[2]-b[0])*(b[3]-b[1]))
	return iw * ih / small
}
