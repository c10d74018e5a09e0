package shapes

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Query is one question about a scene in a LocateAnything task, with the true answer: the
// boxes (pixels) of every object it asks for, in the model's reading order (left to right),
// empty when the thing is absent. For a point query the boxes are those a point must fall in.
type Query struct {
	Task  string // detect | ground | ground_one | point
	Text  string // the query: "red circle", "star</c>blue shape", "all the green squares", ...
	Truth [][4]float64
}

// The chance that a queried category is in the scene (when it has objects), as in training
// (scenes.py): higher for single-instance grounding.
const (
	presentProb          = 0.75
	groundOnePresentProb = 0.85
)

// superlatives are the words of single-instance grounding: "the largest red shape".
var superlatives = []string{"largest", "smallest", "leftmost", "rightmost"}

// NewQuery picks a task (detection half the time, then single-instance grounding, points
// and all-instance grounding) and a query about the scene, as the model was trained.
func NewQuery(r *rand.Rand, s Scene) Query {
	switch pick := r.IntN(10); {
	case pick < 5:
		cats := []string{randomCategory(r, s, presentProb)}
		if r.IntN(4) == 0 {
			for {
				if c := randomCategory(r, s, presentProb); c != cats[0] {
					cats = append(cats, c)
					break
				}
			}
		}
		var truth [][4]float64
		for _, c := range cats {
			truth = append(truth, boxes(s.matching(c))...)
		}
		return Query{Task: "detect", Text: strings.Join(cats, "</c>"), Truth: truth}
	case pick < 6:
		c := randomCategory(r, s, presentProb)
		return Query{Task: "ground", Text: pluralPhrase(r, c), Truth: boxes(s.matching(c))}
	case pick < 8:
		if q, ok := groundOne(r, s); ok {
			return q
		}
		c := randomCategory(r, s, presentProb)
		return Query{Task: "detect", Text: c, Truth: boxes(s.matching(c))}
	default:
		c := randomCategory(r, s, presentProb)
		return Query{Task: "point", Text: c, Truth: boxes(s.matching(c))}
	}
}

// Matches reports whether an object is of a category: "red circle", "circle", "red shape".
func Matches(o Object, category string) bool {
	colour, shape, found := strings.Cut(category, " ")
	if !found {
		colour, shape = "", category
	}
	return (shape == "shape" || shape == o.Shape) && (colour == "" || colour == o.Colour)
}

// matching returns the scene's objects of a category in reading order.
func (s Scene) matching(category string) []Object {
	var out []Object
	for _, o := range s.Objects {
		if Matches(o, category) {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b Object) int {
		if a.Box[0] != b.Box[0] {
			return cmpFloat(a.Box[0], b.Box[0])
		}
		return cmpFloat(a.Box[1], b.Box[1])
	})
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boxes(objs []Object) [][4]float64 {
	out := make([][4]float64, len(objs))
	for i, o := range objs {
		out[i] = o.Box
	}
	return out
}

// randomCategory names a category that is in the scene with probability present (when
// the scene has objects), in one of the forms "red circle", "circle", "red shape".
func randomCategory(r *rand.Rand, s Scene, present float64) string {
	var colour, shape string
	if len(s.Objects) > 0 && r.Float64() < present {
		o := s.Objects[r.IntN(len(s.Objects))]
		colour, shape = o.Colour, o.Shape
	} else {
		colour, shape = Colours[r.IntN(len(Colours))].Name, Shapes[r.IntN(len(Shapes))]
	}
	switch r.IntN(4) {
	case 2:
		return shape
	case 3:
		return colour + " shape"
	}
	return colour + " " + shape
}

// pluralPhrase words a category for all-instance grounding: "blue circles", "all the blue
// circles" or "every blue circle".
func pluralPhrase(r *rand.Rand, category string) string {
	switch r.IntN(3) {
	case 1:
		return "all the " + category + "s"
	case 2:
		return "every " + category
	}
	return category + "s"
}

// groundOne makes a single-instance query such as "the largest blue shape". It gives up
// (false) when every try was ambiguous: the two best candidates within 15 % of each other.
func groundOne(r *rand.Rand, s Scene) (Query, bool) {
	for range 20 {
		word := superlatives[r.IntN(len(superlatives))]
		c := randomCategory(r, s, groundOnePresentProb)
		cands := s.matching(c)
		text := fmt.Sprintf("the %s %s", word, c)
		if len(cands) == 0 {
			return Query{Task: "ground_one", Text: text}, true
		}
		key := func(o Object) float64 {
			x, _ := o.Centre()
			switch word {
			case "largest":
				return -o.Area()
			case "smallest":
				return o.Area()
			case "leftmost":
				return x
			}
			return -x
		}
		slices.SortStableFunc(cands, func(a, b Object) int { return cmpFloat(key(a), key(b)) })
		if len(cands) > 1 {
			a, b := key(cands[0]), key(cands[1])
			scale := float64(s.Image.Bounds().Dx())
			if word == "largest" || word == "smallest" {
				scale = max(abs(a), abs(b))
			}
			if abs(b-a)/scale < 0.15 {
				continue
			}
		}
		return Query{Task: "ground_one", Text: text, Truth: [][4]float64{cands[0].Box}}, true
	}
	return Query{}, false
}

func abs(v float64) float64 { return max(v, -v) }
