package shapes

import (
	"bytes"
	"image/color"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestSameSeedSameScene(t *testing.T) {
	a := NewScene(rand.New(rand.NewPCG(5, 1)))
	b := NewScene(rand.New(rand.NewPCG(5, 1)))
	c := NewScene(rand.New(rand.NewPCG(5, 2)))
	if !bytes.Equal(a.Image.Pix, b.Image.Pix) || len(a.Objects) != len(b.Objects) {
		t.Fatal("one seed gave two different scenes")
	}
	if bytes.Equal(a.Image.Pix, c.Image.Pix) {
		t.Fatal("two seeds gave the same picture")
	}
}

// TestScenesFollowTheWorld checks many scenes against the world's rules: sizes and aspects,
// object sizes (a star is a tenth narrower than its square), boxes inside the picture, the overlap rules, and that each object is really
// painted in its colour where its box says.
func TestScenesFollowTheWorld(t *testing.T) {
	counts := map[int]int{}
	kinds := map[string]int{}
	for i := range 400 {
		s := NewScene(rand.New(rand.NewPCG(11, uint64(i))))
		w, h := s.Image.Bounds().Dx(), s.Image.Bounds().Dy()
		if max(w, h) > maxSide || min(w, h) < minSide {
			t.Fatalf("scene %d is %dx%d, outside %d..%d px", i, w, h, minSide, maxSide)
		}
		if a := float64(w) / float64(h); a < minAspect-0.05 || a > maxAspect+0.05 {
			t.Fatalf("scene %d has aspect %.2f", i, a)
		}
		counts[len(s.Objects)]++
		for j, o := range s.Objects {
			kinds[o.Shape]++
			side := math.Max(o.Box[2]-o.Box[0], o.Box[3]-o.Box[1])
			short := float64(min(w, h))
			if side < 0.9*minSize*short || side > maxSize*short+1e-9 {
				t.Fatalf("scene %d object %d: side %.1f outside %.2f..%.2f of %v", i, j, side, minSize, maxSize, short)
			}
			if o.Box[0] < 0 || o.Box[1] < 0 || o.Box[2] > float64(w) || o.Box[3] > float64(h) {
				t.Fatalf("scene %d object %d: box %v leaves the %dx%d picture", i, j, o.Box, w, h)
			}
			for k, other := range s.Objects[:j] {
				limit := 0.25
				if other.Colour == o.Colour {
					limit = 1e-9
				}
				if overlapFraction(o.Box, other.Box) >= limit {
					t.Fatalf("scene %d objects %d and %d overlap too much", i, k, j)
				}
			}
			if !coveredLater(s.Objects[j+1:], o) {
				assertPaintedAtCentre(t, s, o)
			}
		}
	}
	for n := range maxObjects + 1 {
		if counts[n] == 0 {
			t.Errorf("no scene with %d objects in 400: %v", n, counts)
		}
	}
	for _, k := range Shapes {
		if kinds[k] == 0 {
			t.Errorf("no %s drawn in 400 scenes", k)
		}
	}
}

func coveredLater(later []Object, o Object) bool {
	x, y := o.Centre()
	for _, l := range later {
		if l.Box[0]-1 <= x && x <= l.Box[2]+1 && l.Box[1]-1 <= y && y <= l.Box[3]+1 {
			return true
		}
	}
	return false
}

// assertPaintedAtCentre: the pixel at the box centre (inside every one of the shapes) is
// the object's colour, within its jitter.
func assertPaintedAtCentre(t *testing.T, s Scene, o Object) {
	t.Helper()
	x, y := o.Centre()
	got := s.Image.RGBAAt(int(x), int(y))
	want := colourRGB(o.Colour)
	for i, v := range []uint8{got.R, got.G, got.B} {
		if d := int(v) - want[i]; d < -20 || d > 20 {
			t.Fatalf("%s %s at %v: pixel %v, want %v +-20", o.Colour, o.Shape, o.Box, got, want)
		}
	}
}

func TestPolygonFillCoversTheShape(t *testing.T) {
	s := Scene{Image: background(rand.New(rand.NewPCG(1, 1)), 100, 100)}
	red := color.RGBA{255, 0, 0, 255}
	fillPolygon(s.Image, polygon("square", 10.2, 20.7, 30), red)
	painted := 0
	for y := range 100 {
		for x := range 100 {
			if s.Image.RGBAAt(x, y) == red {
				painted++
				if float64(x)+0.5 < 10.2 || float64(x)+0.5 > 40.2 || float64(y)+0.5 < 20.7 || float64(y)+0.5 > 50.7 {
					t.Fatalf("pixel %d,%d painted outside the square", x, y)
				}
			}
		}
	}
	if painted != 30*30 {
		t.Fatalf("a 30 px square painted %d pixels, want 900", painted)
	}
}

// TestQueriesSayTheTruth checks that every query's true boxes are exactly the objects its
// words name, and that the tasks and absent things occur at about the trained rates.
func TestQueriesSayTheTruth(t *testing.T) {
	tasks := map[string]int{}
	absent := 0
	const n = 2000
	for i := range n {
		r := rand.New(rand.NewPCG(3, uint64(i)))
		s := NewScene(r)
		q := NewQuery(r, s)
		tasks[q.Task]++
		if len(q.Truth) == 0 {
			absent++
		}
		switch q.Task {
		case "detect", "point", "ground":
			var want [][4]float64
			for _, cat := range strings.Split(categoryOf(q), "</c>") {
				want = append(want, boxes(s.matching(cat))...)
			}
			if len(want) != len(q.Truth) {
				t.Fatalf("%s %q: %d true boxes, the scene has %d matching objects", q.Task, q.Text, len(q.Truth), len(want))
			}
			for k := range want {
				if want[k] != q.Truth[k] {
					t.Fatalf("%s %q: truth %v, want %v (reading order)", q.Task, q.Text, q.Truth, want)
				}
			}
		case "ground_one":
			if len(q.Truth) > 1 || !strings.HasPrefix(q.Text, "the ") {
				t.Fatalf("ground_one %q has %d boxes", q.Text, len(q.Truth))
			}
		default:
			t.Fatalf("unknown task %q", q.Task)
		}
	}
	for task, share := range map[string]float64{"detect": 0.5, "ground": 0.1, "ground_one": 0.2, "point": 0.2} {
		if got := float64(tasks[task]) / n; math.Abs(got-share) > 0.05 {
			t.Errorf("task %s: %.2f of queries, want about %.2f", task, got, share)
		}
	}
	if got := float64(absent) / n; got < 0.2 || got > 0.5 {
		t.Errorf("%.2f of queries ask for something absent, want 0.2..0.5", got)
	}
}

// categoryOf undoes pluralPhrase for ground queries.
func categoryOf(q Query) string {
	if q.Task != "ground" {
		return q.Text
	}
	if c, ok := strings.CutPrefix(q.Text, "every "); ok {
		return c
	}
	return strings.TrimSuffix(strings.TrimPrefix(q.Text, "all the "), "s")
}

func TestMatches(t *testing.T) {
	o := Object{Shape: "star", Colour: "blue"}
	for cat, want := range map[string]bool{"blue star": true, "star": true, "blue shape": true, "red star": false,
		"circle": false, "red shape": false} {
		if Matches(o, cat) != want {
			t.Errorf("Matches(blue star, %q) = %v", cat, !want)
		}
	}
}

func TestMatchAndTally(t *testing.T) {
	if v := IoU([4]float64{0, 0, 10, 10}, [4]float64{5, 0, 15, 10}); math.Abs(v-1.0/3) > 1e-12 {
		t.Fatalf("IoU of half-overlapping squares = %v, want 1/3", v)
	}
	truth := [][4]float64{{0, 0, 10, 10}, {20, 20, 30, 30}}
	// One box fits the first object, one is near the second (IoU 0.41), one is nowhere.
	pred := [][4]float64{{22, 22, 33, 33}, {0, 0, 10, 11}, {50, 50, 60, 60}}
	ious, unmatched := Match(truth, pred)
	if ious[0] < 0.9 || ious[1] >= 0.5 || ious[1] < 0.4 || unmatched != 2 {
		t.Fatalf("Match = %v, %d unmatched; want [>0.9 0.4..0.5], 2", ious, unmatched)
	}
	var tl Tally
	tl.Add(truth, pred)
	tl.Add(nil, nil)
	tl.Add(nil, [][4]float64{{1, 1, 2, 2}})
	tl.AddPoints(truth, [][2]float64{{5, 5}, {5, 6}})
	found, _, fp, noneAcc := tl.Figures()
	if tl.Found != 2 || tl.Objects != 4 || found != 0.5 || tl.FalsePos != 4 || fp != 1 || noneAcc != 0.5 {
		t.Fatalf("tally %+v: found %v fp/query %v None %v", tl, found, fp, noneAcc)
	}
}
