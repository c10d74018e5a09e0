package tinymodel

// The detection figures of evaluate.py, in Go: greedy one-to-one matching by IoU.

import (
	"cmp"
	"slices"
)

func iou(a, b [4]float64) float64 {
	iw := min(a[2], b[2]) - max(a[0], b[0])
	ih := min(a[3], b[3]) - max(a[1], b[1])
	if iw <= 0 || ih <= 0 {
		return 0
	}
	inter := iw * ih
	return inter / ((a[2]-a[0])*(a[3]-a[1]) + (b[2]-b[0])*(b[3]-b[1]) - inter)
}

// match pairs truth and predicted boxes one to one, best IoU first, at IoU >= 0.5. It
// returns each truth box's IoU (its match's, or its best overlap with a leftover box) and
// the number of predicted boxes left unmatched.
func match(truth, pred [][4]float64) (ious []float64, unmatched int) {
	type pair struct {
		v    float64
		i, j int
	}
	var pairs []pair
	for i, tb := range truth {
		for j, pb := range pred {
			pairs = append(pairs, pair{iou(tb, pb), i, j})
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
				ious[i] = max(ious[i], iou(tb, pb))
			}
		}
	}
	return ious, len(pred) - len(usedP)
}

// boxTally accumulates detection figures over queries.
type boxTally struct {
	queries, objects, found, falsePos, absent, noneOK int
	iouSum                                            float64
}

func (t *boxTally) add(truth, pred [][4]float64) {
	t.queries++
	if len(truth) == 0 {
		t.absent++
		if len(pred) == 0 {
			t.noneOK++
		}
	}
	ious, fp := match(truth, pred)
	t.objects += len(truth)
	for _, v := range ious {
		t.iouSum += v
		if v >= 0.5 {
			t.found++
		}
	}
	t.falsePos += fp
}

// figures returns found@0.5, mean IoU over truth objects, false positives per query and
// the share of absent-thing queries answered with no box.
func (t *boxTally) figures() (found, meanIoU, fpPerQuery, noneAcc float64) {
	if t.objects > 0 {
		found, meanIoU = float64(t.found)/float64(t.objects), t.iouSum/float64(t.objects)
	}
	if t.queries > 0 {
		fpPerQuery = float64(t.falsePos) / float64(t.queries)
	}
	if t.absent > 0 {
		noneAcc = float64(t.noneOK) / float64(t.absent)
	}
	return
}
