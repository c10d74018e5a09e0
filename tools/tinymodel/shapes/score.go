package shapes

// The detection figures of tools/tinymodel/evaluate.py, in Go: greedy one-to-one matching
// by IoU at 0.5.

import (
	"cmp"
	"slices"
)

// IoU is the intersection over union of two boxes (x1, y1, x2, y2).
func IoU(a, b [4]float64) float64 {
	iw := min(a[2], b[2]) - max(a[0], b[0])
	ih := min(a[3], b[3]) - max(a[1], b[1])
	if iw <= 0 || ih <= 0 {
		return 0
	}
	inter := iw * ih
	return inter / ((a[2]-a[0])*(a[3]-a[1]) + (b[2]-b[0])*(b[3]-b[1]) - inter)
}

// Match pairs truth and predicted boxes one to one, best IoU first, at IoU >= 0.5. It
// returns each truth box's IoU (its match's, or its best overlap with a leftover box) and
// the number of predicted boxes left unmatched.
func Match(truth, pred [][4]float64) (ious []float64, unmatched int) {
	type pair struct {
		v    float64
		i, j int
	}
	var pairs []pair
	for i, tb := range truth {
		for j, pb := range pred {
			pairs = append(pairs, pair{IoU(tb, pb), i, j})
		}
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(b.v, a.v) })
	ious = make([]float64, len(truth))
	usedT, usedP := map[int]bool{}, map[int]bool{}
	for _, p := range pairs {
		if p.v < 0.5 || usedT[p.i] || usedP[p.j] {
			continue
		}
		ious[p.i] = p.v
		usedT[p.i], usedP[p.j] = true, true
	}
	for i, tb := range truth {
		if usedT[i] {
			continue
		}
		for j, pb := range pred {
			if !usedP[j] {
				ious[i] = max(ious[i], IoU(tb, pb))
			}
		}
	}
	return ious, len(pred) - len(usedP)
}

// Tally accumulates detection figures over queries.
type Tally struct {
	Queries, Objects, Found, FalsePos, Absent, NoneOK int
	IoUSum                                            float64
}

// Add counts one box query: its true boxes and the predicted ones.
func (t *Tally) Add(truth, pred [][4]float64) {
	t.Queries++
	if len(truth) == 0 {
		t.Absent++
		if len(pred) == 0 {
			t.NoneOK++
		}
	}
	ious, fp := Match(truth, pred)
	t.Objects += len(truth)
	for _, v := range ious {
		t.IoUSum += v
		if v >= 0.5 {
			t.Found++
		}
	}
	t.FalsePos += fp
}

// AddPoints counts one point query: a true box is found when an unused point lies in it.
func (t *Tally) AddPoints(truth [][4]float64, points [][2]float64) {
	t.Queries++
	if len(truth) == 0 {
		t.Absent++
		if len(points) == 0 {
			t.NoneOK++
		}
	}
	used := map[int]bool{}
	for _, b := range truth {
		for j, p := range points {
			if !used[j] && b[0] <= p[0] && p[0] <= b[2] && b[1] <= p[1] && p[1] <= b[3] {
				used[j] = true
				t.Found++
				break
			}
		}
	}
	t.Objects += len(truth)
	t.FalsePos += len(points) - len(used)
}

// Figures returns found@0.5, mean IoU over truth objects, false positives per query and
// the share of absent-thing queries answered with nothing.
func (t *Tally) Figures() (found, meanIoU, fpPerQuery, noneAcc float64) {
	if t.Objects > 0 {
		found, meanIoU = float64(t.Found)/float64(t.Objects), t.IoUSum/float64(t.Objects)
	}
	if t.Queries > 0 {
		fpPerQuery = float64(t.FalsePos) / float64(t.Queries)
	}
	if t.Absent > 0 {
		noneAcc = float64(t.NoneOK) / float64(t.Absent)
	}
	return
}
