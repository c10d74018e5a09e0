package tinymodel

import (
	"bytes"
	"cmp"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// Token ids of the bundled model's answer grammar (models/tiny-shapes/config.json).
const (
	boxStartID           = 416
	boxEndID             = 417
	coordFirst, coordLst = 421, 1421 // <0> .. <1000>
)

// minScoreAUC is the floor for the chance that a true box outscores a false one on fresh
// scenes; 0.5 is a score that knows nothing (docs/scores.md: measured 0.669).
const minScoreAUC = 0.62

// scoredBox is one generated box: whether it is true (matched to an object at IoU >= 0.5),
// its score, and the probabilities of its tokens <box> x1 y1 x2 y2 </box>.
type scoredBox struct {
	tp    bool
	score float64
	probs [6]float64
}

// TestScoresRankTrueBoxesAboveFalse runs fresh shape scenes (the detect and ground
// queries, which answer with boxes) through the engine and measures how well each box's
// score tells the boxes that match an object from those that do not: the AUC, the chance
// that a true box outscores a false one. It also logs the other ways a score could be made
// from the same tokens, which is how the rule was chosen (docs/scores.md).
func TestScoresRankTrueBoxesAboveFalse(t *testing.T) {
	p := openBundled(t, 48, "")

	var boxes []scoredBox
	objects := 0
	for i := range 400 {
		r := rand.New(rand.NewPCG(7, uint64(i)))
		s := shapes.NewScene(r)
		q := shapes.NewQuery(r, s)
		if q.Task != "detect" && q.Task != "ground" {
			continue
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, s.Image); err != nil {
			t.Fatal(err)
		}
		_, pred := predict(t, p, buf.Bytes(), q.Text, q.Task, fmt.Sprintf("scene %d", i))
		got := boxesOf(t, pred)
		markTrue(got, pred.Detections, q.Truth)
		boxes = append(boxes, got...)
		objects += len(q.Truth)
	}
	trueBoxes := 0
	for _, b := range boxes {
		if b.tp {
			trueBoxes++
		}
	}
	t.Logf("%d boxes for %d objects: %d true, %d false", len(boxes), objects, trueBoxes, len(boxes)-trueBoxes)

	geo := func(ps ...float64) float64 {
		s := 0.0
		for _, p := range ps {
			s += math.Log(p)
		}
		return math.Exp(s / float64(len(ps)))
	}
	rules := []struct {
		name  string
		score func(b scoredBox) float64
	}{
		{"the score (geometric mean of x1 y1 x2 y2)", func(b scoredBox) float64 { return b.score }},
		{"product of x1 y1 x2 y2", func(b scoredBox) float64 { return b.probs[1] * b.probs[2] * b.probs[3] * b.probs[4] }},
		{"least of x1 y1 x2 y2", func(b scoredBox) float64 { return min(b.probs[1], b.probs[2], b.probs[3], b.probs[4]) }},
		{"mean of x1 y1 x2 y2", func(b scoredBox) float64 { return (b.probs[1] + b.probs[2] + b.probs[3] + b.probs[4]) / 4 }},
		{"x1 alone", func(b scoredBox) float64 { return b.probs[1] }},
		{"<box> alone", func(b scoredBox) float64 { return b.probs[0] }},
		{"<box> x geometric mean", func(b scoredBox) float64 { return b.probs[0] * geo(b.probs[1:5]...) }},
		{"geometric mean of all six", func(b scoredBox) float64 { return geo(b.probs[:]...) }},
	}
	for i, rule := range rules {
		auc := rankAUC(boxes, rule.score)
		t.Logf("AUC %.3f  %s", auc, rule.name)
		if i == 0 && auc < minScoreAUC {
			t.Errorf("the score ranks a true box above a false one %.3f of the time, want at least %.2f", auc, minScoreAUC)
		}
	}
}

// boxesOf finds each detection's tokens in the generated ids (<box>, four coordinates,
// </box>) and checks that its score is the geometric mean of its coordinates'
// probabilities.
func boxesOf(t *testing.T, pred *engine.Prediction) []scoredBox {
	t.Helper()
	var out []scoredBox
	toks := pred.Tokens
	for i := 0; i+5 < len(toks); i++ {
		if toks[i] != boxStartID || toks[i+5] != boxEndID ||
			slices.ContainsFunc(toks[i+1:i+5], func(id int32) bool { return id < coordFirst || id > coordLst }) {
			continue
		}
		var b scoredBox
		for k := range 6 {
			b.probs[k] = float64(pred.Probs[i+k])
		}
		out = append(out, b)
	}
	// The parser drops exact repeats; so does this count, by comparing with its boxes.
	if len(out) < len(pred.Detections) {
		t.Fatalf("%d boxes in the tokens of %q, %d detections", len(out), pred.RawText, len(pred.Detections))
	}
	var kept []scoredBox
	for _, d := range pred.Detections {
		for j, b := range out {
			want := math.Round(math.Pow(b.probs[1]*b.probs[2]*b.probs[3]*b.probs[4], 0.25)*1e4) / 1e4
			if math.Abs(want-d.Score) < 1e-9 {
				b.score = d.Score
				kept = append(kept, b)
				out = slices.Delete(out, j, j+1)
				break
			}
		}
	}
	if len(kept) != len(pred.Detections) {
		t.Fatalf("the scores of %v are not the geometric means of their coordinates' probabilities (%q)", pred.Detections, pred.RawText)
	}
	return kept
}

// markTrue marks the boxes that match a true one one to one at IoU >= 0.5, the best
// overlaps first (as shapes.Match pairs them).
func markTrue(boxes []scoredBox, dets []engine.Detection, truth [][4]float64) {
	type pair struct {
		iou  float64
		d, g int
	}
	var pairs []pair
	for di, d := range dets {
		for gi, g := range truth {
			if v := shapes.IoU(d.Box, g); v >= 0.5 {
				pairs = append(pairs, pair{v, di, gi})
			}
		}
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(b.iou, a.iou) })
	usedD, usedG := map[int]bool{}, map[int]bool{}
	for _, p := range pairs {
		if !usedD[p.d] && !usedG[p.g] {
			usedD[p.d], usedG[p.g] = true, true
			boxes[p.d].tp = true
		}
	}
}

// rankAUC is the chance that a true box scores above a false one (ties count half).
func rankAUC(boxes []scoredBox, score func(scoredBox) float64) float64 {
	var pos, neg []float64
	for _, b := range boxes {
		if b.tp {
			pos = append(pos, score(b))
		} else {
			neg = append(neg, score(b))
		}
	}
	wins := 0.0
	for _, a := range pos {
		for _, c := range neg {
			switch {
			case a > c:
				wins++
			case a == c:
				wins += 0.5
			}
		}
	}
	return wins / float64(len(pos)*len(neg))
}
