package overlay

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

// layoutCase is a picture size and the answers on it.
type layoutCase struct {
	name string
	w, h int
	dets []engine.Detection
	pts  []engine.Point
}

func det(label string, score float64, x1, y1, x2, y2 float64) engine.Detection {
	return engine.Detection{Label: label, Score: score, Box: [4]float64{x1, y1, x2, y2}}
}

// layoutCases are the shapes of answer that broke the old overlay: two labels on one
// object, labels at the edge, long labels on the held-out scenes' small pictures, many
// boxes, and points.
func layoutCases() []layoutCase {
	var crowd []engine.Detection
	for i := range 40 {
		x, y := float64(i%8*25), float64(i/8*20)
		crowd = append(crowd, det(fmt.Sprintf("thing %d", i), 0.5+float64(i)/100, x+2, y+2, x+30, y+24))
	}
	twelve := twelveBoxes()
	return []layoutCase{
		{"one box", 640, 480, []engine.Detection{det("dog", 0.91, 100, 120, 250, 260)}, nil},
		{"two labels on one object", 400, 300, []engine.Detection{
			det("red circle", 0.8, 100, 100, 200, 200), det("blue square", 0.6, 101, 100, 200, 201)}, nil},
		{"boxes at the edges", 300, 200, []engine.Detection{
			det("the largest purple triangle", 0.77, 0, 0, 60, 40), det("green square on the right", 0.93, 250, 160, 300, 200),
			det("top right", 0.5, 260, 0, 300, 30)}, nil},
		{"held-out scene 87x170", 87, 170, []engine.Detection{
			det("the largest purple triangle", 0.93, 10, 60, 80, 120), det("purple shape", 0.4, 40, 130, 80, 165)}, nil},
		{"held-out scene 126x220 one box", 126, 220, []engine.Detection{det("triangle", 0.88, 51, 18, 106, 74)}, nil},
		{"crowded", 220, 130, crowd, nil},
		{"points", 200, 150, nil, []engine.Point{
			{Label: "nose", Score: 0.7, Point: [2]float64{60, 80}}, {Label: "eye", Score: 0.6, Point: [2]float64{66, 74}},
			{Label: "edge", Point: [2]float64{199, 149}}}},
		{"tiny picture", 30, 24, []engine.Detection{det("a shape with a long name", 0.5, 2, 2, 20, 20)}, nil},
		{"held-out scene 87x170 twelve boxes", 87, 170, twelve, nil},
	}
}

// twelveBoxes are 12 answers on an 87x170 picture, three columns by four rows apart from
// each other: far more text than the picture has room for.
func twelveBoxes() []engine.Detection {
	var out []engine.Detection
	for i := range 12 {
		x, y := float64(3+i%3*28), float64(3+i/3*42)
		out = append(out, det(fmt.Sprintf("purple shape number %d", i+1), 0.9-float64(i)/50, x, y, x+24, y+36))
	}
	return out
}

// items are what Draw would lay out for c.
func (c layoutCase) items() []item {
	b := image.Rect(0, 0, c.w, c.h)
	st := styleFor(b)
	var out []item
	for _, d := range c.dets {
		if r, ok := boxRect(d.Box, b); ok {
			out = append(out, item{text: tagText(d.Label, d.Score), label: d.Label, score: d.Score, anchor: r})
		}
	}
	for _, p := range c.pts {
		if pt, ok := pointAt(p.Point, b); ok {
			a := image.Rect(pt.X-st.radius, pt.Y-st.radius, pt.X+st.radius+1, pt.Y+st.radius+1).Intersect(b)
			out = append(out, item{text: tagText(p.Label, p.Score), label: p.Label, score: p.Score, anchor: a})
		}
	}
	return out
}

// checkPlan fails unless p keeps the layout's promises for the picture pic, its text
// kept inside area: every tag inside area, no two overlapping, a legend only in a margin
// below the picture (as wide as it, exactly as tall as its lines), so that it hides no
// box; every text drawn whole in its rectangle, and every answer's label and score said
// once, on its tag or in the legend.
func checkPlan(t *testing.T, pic, area image.Rectangle, items []item, p plan) {
	t.Helper()
	if len(p.tags) == 0 && len(p.legendLines) == 0 {
		return // no text: a picture too small for any
	}
	rects := []image.Rectangle{}
	if len(p.tags) > 0 {
		face := newFace(p.fontPx)
		if face == nil {
			t.Fatal("no face")
		}
		defer face.Close()
		m := metricsOf(face, p.fontPx)
		for _, tg := range p.tags {
			rects = append(rects, tg.rect)
			if w := m.width(tg.text); w > tg.rect.Dx() || m.lineH > tg.rect.Dy() {
				t.Errorf("tag %q (%dx%d) does not fit its rectangle %v", tg.text, w, m.lineH, tg.rect)
			}
		}
	}
	for i, r := range rects {
		if !r.In(area) || r.Empty() {
			t.Errorf("text box %v is not inside %v", r, area)
		}
		for _, o := range rects[i+1:] {
			if r.Overlaps(o) {
				t.Errorf("text boxes %v and %v overlap", r, o)
			}
		}
	}
	if len(p.legendLines) > 0 {
		face := newFace(p.legendPx)
		if face == nil {
			t.Fatal("no face")
		}
		defer face.Close()
		m := metricsOf(face, p.legendPx)
		for i, l := range p.legendLines {
			if w := p.swatchW + m.width(l.text); w > p.legend.Dx() {
				t.Errorf("legend line %d %q is %d px wide, the legend %d", i, l.text, w, p.legend.Dx())
			}
		}
		want := image.Rect(pic.Min.X, pic.Max.Y, pic.Max.X, pic.Max.Y+len(p.legendLines)*m.lineH)
		if p.legend != want || p.margin != want.Dy() {
			t.Errorf("legend at %v with a %d px margin, want %v: below the picture %v, hiding none of it", p.legend, p.margin, want, pic)
		}
		for _, it := range items {
			if it.anchor.Overlaps(p.legend) {
				t.Errorf("the legend %v covers the box %v", p.legend, it.anchor)
			}
		}
	} else if p.margin != 0 {
		t.Errorf("a %d px margin without a legend", p.margin)
	}
	// what is said: each answer's whole tag text, on its tag or across its legend lines
	said := map[string]int{}
	if len(p.legendLines) == 0 {
		for _, tg := range p.tags {
			said[tg.text]++
		}
	} else {
		entry := ""
		for i, l := range p.legendLines {
			if l.number != "" && i > 0 {
				said[entry]++
				entry = ""
			}
			if entry != "" && !strings.HasSuffix(entry, " ") {
				entry += " "
			}
			entry += l.text
		}
		said[entry]++
		for _, tg := range p.tags {
			if tg.text == "" || strings.Trim(tg.text, "0123456789") != "" {
				t.Errorf("legend mode: tag %q, want a number", tg.text)
			}
		}
	}
	for _, it := range items {
		want := tagText(it.label, it.score)
		if said[want] > 0 {
			said[want]--
			continue
		}
		// a word longer than a legend line is broken between runes: compare without spaces
		found := false
		for s, n := range said {
			if n > 0 && strings.ReplaceAll(s, " ", "") == strings.ReplaceAll(want, " ", "") {
				said[s]--
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%q is said nowhere whole (tags %v, legend %v)", want, p.tags, p.legendLines)
		}
	}
}

func TestLayoutNeitherOverlapsNorLeavesThePicture(t *testing.T) {
	for _, c := range layoutCases() {
		t.Run(c.name, func(t *testing.T) {
			b := image.Rect(0, 0, c.w, c.h)
			items := c.items()
			p := layout(b, b, styleFor(b).fontPx, items, nil)
			if len(p.tags) == 0 && len(p.legendLines) == 0 {
				t.Fatalf("no text for %d answers", len(items))
			}
			checkPlan(t, b, b, items, p)
			if c.name != "crowded" && len(p.legendLines) > 0 && len(p.tags) != len(items) {
				// (40 boxes on 220x130 keep only the numbered tags that have room)
				t.Errorf("legend mode: %d numbered tags for %d answers", len(p.tags), len(items))
			}
			// with the SIMULATED band, the text keeps above it
			bp := planBand(b, styleFor(b).fontPx)
			area := b
			area.Max.Y = bp.rect.Min.Y
			checkPlan(t, b, area, items, layout(b, area, styleFor(b).fontPx, items, nil))
		})
	}
}

// TestLayoutTriesSmallerTextBeforeALegend: the held-out scene's one-box picture gets its
// tag in full, smaller than the default size rather than in a legend; the crowded and the
// small two-box pictures get a legend.
func TestLayoutTriesSmallerTextBeforeALegend(t *testing.T) {
	cases := map[string]layoutCase{}
	for _, c := range layoutCases() {
		cases[c.name] = c
	}
	one := cases["held-out scene 126x220 one box"]
	b := image.Rect(0, 0, one.w, one.h)
	p := layout(b, b, styleFor(b).fontPx, one.items(), nil)
	if len(p.legendLines) != 0 || len(p.tags) != 1 || p.tags[0].text != "triangle 0.88" {
		t.Errorf("one box on 126x220: tags %v, legend %v; want the tag \"triangle 0.88\"", p.tags, p.legendLines)
	}
	big := cases["one box"]
	b = image.Rect(0, 0, big.w, big.h)
	if p := layout(b, b, styleFor(b).fontPx, big.items(), nil); p.fontPx != styleFor(b).fontPx {
		t.Errorf("one box on 640x480 drawn at %.1f px, want the full %.1f", p.fontPx, styleFor(b).fontPx)
	}
	for _, name := range []string{"crowded", "held-out scene 87x170"} {
		c := cases[name]
		b := image.Rect(0, 0, c.w, c.h)
		if p := layout(b, b, styleFor(b).fontPx, c.items(), nil); len(p.legendLines) == 0 {
			t.Errorf("%s: no legend (tags %v)", name, p.tags)
		}
	}
}

// TestDrawTagsWhereTheLayoutSays: the drawn picture has each tag's colour where the plan
// puts the tag, text pixels inside it, and the score in the text.
func TestDrawTagsWhereTheLayoutSays(t *testing.T) {
	src := scene(400, 300)
	dets := []engine.Detection{det("red circle", 0.8, 100, 100, 200, 200), det("blue square", 0.6, 101, 100, 200, 201)}
	got := Draw(src, dets, nil)
	c := layoutCase{w: 400, h: 300, dets: dets}
	p := layout(got.Bounds(), got.Bounds(), styleFor(got.Bounds()).fontPx, c.items(), nil)
	if len(p.tags) != 2 || p.tags[0].text != "red circle 0.80" || p.tags[1].text != "blue square 0.60" {
		t.Fatalf("tags %v; want both labels with their scores", p.tags)
	}
	for _, tg := range p.tags {
		fillPx, textPx := 0, 0
		for y := tg.rect.Min.Y; y < tg.rect.Max.Y; y++ {
			for x := tg.rect.Min.X; x < tg.rect.Max.X; x++ {
				if got.RGBAAt(x, y) == LabelColor(tg.label) {
					fillPx++
				} else {
					textPx++
				}
			}
		}
		if fillPx < tg.rect.Dx()*tg.rect.Dy()/2 || textPx < 20 {
			t.Errorf("tag %q at %v: %d fill and %d text pixels", tg.text, tg.rect, fillPx, textPx)
		}
	}
}

// TestSimulatedBand: Options{Simulated: true} darkens a band along the bottom with amber
// SIMULATED text, on an answer with boxes and on one without; the tags keep clear of it;
// without the option nothing of it is drawn.
func TestSimulatedBand(t *testing.T) {
	src := scene(320, 240)
	dets := []engine.Detection{det("shape at the bottom", 0.9, 20, 200, 300, 240)}
	for _, d := range [][]engine.Detection{nil, dets} {
		got := Options{Simulated: true}.Draw(src, d, nil)
		bp := planBand(got.Bounds(), styleFor(got.Bounds()).fontPx)
		if bp.text != simulatedText || bp.rect.Max.Y != 240 || bp.rect.Dx() != 320 {
			t.Fatalf("band %+v, want SIMULATED across the bottom", bp)
		}
		amber, darker := 0, 0
		for y := bp.rect.Min.Y; y < bp.rect.Max.Y; y++ {
			for x := bp.rect.Min.X; x < bp.rect.Max.X; x++ {
				c, o := got.RGBAAt(x, y), src.RGBAAt(x, y)
				switch {
				case c == bandColor:
					amber++
				case int(c.R)+int(c.G)+int(c.B) < int(o.R)+int(o.G)+int(o.B):
					darker++
				}
			}
		}
		if amber < 30 || darker < bp.rect.Dx()*bp.rect.Dy()/2 {
			t.Errorf("%d detections: band has %d amber text pixels and %d darkened ones", len(d), amber, darker)
		}
		if len(d) > 0 {
			area := got.Bounds()
			area.Max.Y = bp.rect.Min.Y
			c := layoutCase{w: 320, h: 240, dets: d}
			for _, tg := range layout(got.Bounds(), area, styleFor(got.Bounds()).fontPx, c.items(), nil).tags {
				if tg.rect.Overlaps(bp.rect) {
					t.Errorf("tag %v covers the band %v", tg.rect, bp.rect)
				}
			}
		}
	}
	if got := Draw(src, nil, nil); !bytes.Equal(got.Pix, src.Pix) {
		t.Error("without Simulated an empty answer changed the picture")
	}
	if got := (Options{}).Draw(src, dets, nil); got.RGBAAt(160, 239) == bandColor || got.RGBAAt(5, 239) != src.RGBAAt(5, 239) {
		t.Error("without Simulated a band was drawn")
	}
	// a picture too narrow for the word gets the short form, one too small for any a plain band
	if bp := planBand(image.Rect(0, 0, 40, 40), 12); bp.text != simulatedShort {
		t.Errorf("40x40: band text %q, want %q", bp.text, simulatedShort)
	}
	if bp := planBand(image.Rect(0, 0, 6, 6), 12); bp.text != "" || bp.rect.Empty() {
		t.Errorf("6x6: band %+v, want a band with no text", bp)
	}
}

// TestLegendGoesBelowThePicture: 12 boxes on the held-out scenes' 87x170 picture leave no
// room for tags, and the legend then goes in a margin added below the picture instead of
// over it: the overlay is as wide and taller, the picture keeps every box visible (at least
// half of each outline in its colour; the numbered tags cover the rest), and the margin
// holds the legend's text and swatches. An answer whose tags fit keeps the picture's size.
func TestLegendGoesBelowThePicture(t *testing.T) {
	src := scene(87, 170)
	dets := twelveBoxes()
	got := Draw(src, dets, nil)
	if b := got.Bounds(); b.Dx() != 87 || b.Dy() <= 170 {
		t.Fatalf("overlay is %v, want 87 wide and taller than 170 (a margin for the legend)", b)
	}
	for _, d := range dets {
		r, _ := boxRect(d.Box, src.Bounds())
		col, on, all := LabelColor(d.Label), 0, 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				if x >= r.Min.X+2 && x < r.Max.X-2 && y >= r.Min.Y+2 && y < r.Max.Y-2 {
					continue // inside the 2 px outline
				}
				all++
				if got.RGBAAt(x, y) == col {
					on++
				}
			}
		}
		if on*2 < all {
			t.Errorf("box %q at %v: %d of its %d outline pixels visible", d.Label, r, on, all)
		}
	}
	white, swatch := 0, 0
	for y := 170; y < got.Bounds().Max.Y; y++ {
		for x := range 87 {
			switch c := got.RGBAAt(x, y); {
			case c == color.RGBA{255, 255, 255, 255}:
				white++
			case c == LabelColor(dets[0].Label):
				swatch++
			}
		}
	}
	if white < 100 || swatch < 20 {
		t.Errorf("the margin has %d white text pixels and %d of the first swatch's colour; want the legend", white, swatch)
	}
	if got := Draw(src, []engine.Detection{det("dog", 0.9, 20, 60, 80, 120)}, nil); got.Bounds() != src.Bounds() {
		t.Errorf("one box: overlay %v, want the picture's %v", got.Bounds(), src.Bounds())
	}
}
