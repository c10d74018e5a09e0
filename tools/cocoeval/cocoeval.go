// Package cocoeval is a small, independent implementation of the COCO detection metrics
// for boxes, written from the published definition (the COCO detection evaluation page and
// the COCOeval class of the reference API, which this package follows step for step; see
// README.md). It exists so that this repository's COCO export can be evaluated in its tests
// without pycocotools, which is not installable here; it reads the same two files:
// a ground-truth dataset (images, annotations, categories) and a results list
// ([{image_id, category_id, bbox, score}]).
//
// The twelve figures of COCOeval.summarize: average precision over IoU thresholds
// 0.50:0.05:0.95 (AP), at 0.50 and 0.75, and for small, medium and large objects, and
// average recall at 1, 10 and 100 detections per image and by size. A figure that has
// nothing to average (no ground truth in that size range, say) is -1, as in COCOeval.
package cocoeval

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
)

// Dataset is a COCO ground-truth file; only what box evaluation reads.
type Dataset struct {
	Images      []Image      `json:"images"`
	Annotations []Annotation `json:"annotations"`
	Categories  []Category   `json:"categories"`
}

// Image is one image of a Dataset.
type Image struct {
	ID int `json:"id"`
}

// Category is one category of a Dataset.
type Category struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// Annotation is one true object: its box [x, y, width, height] and area (the evaluation
// sorts objects into sizes by Area, not by the box, as COCOeval does). A crowd annotation
// (IsCrowd 1) is never missed and a detection matched to it counts neither way.
type Annotation struct {
	ID         int        `json:"id"`
	ImageID    int        `json:"image_id"`
	CategoryID int        `json:"category_id"`
	BBox       [4]float64 `json:"bbox"`
	Area       float64    `json:"area"`
	IsCrowd    int        `json:"iscrowd"`
}

// Detection is one line of a results file.
type Detection struct {
	ImageID    int        `json:"image_id"`
	CategoryID int        `json:"category_id"`
	BBox       [4]float64 `json:"bbox"`
	Score      float64    `json:"score"`
}

// Stats are COCOeval.summarize's twelve figures, in its order.
type Stats struct {
	AP, AP50, AP75, APSmall, APMedium, APLarge   float64
	AR1, AR10, AR100, ARSmall, ARMedium, ARLarge float64
}

// The evaluation's parameters, COCOeval's defaults for boxes.
var (
	iouThresholds = linspace(0.5, 0.95, 10)
	recThresholds = linspace(0, 1, 101)
	maxDets       = []int{1, 10, 100}
	areaRanges    = [][2]float64{{0, 1e10}, {0, 32 * 32}, {32 * 32, 96 * 96}, {96 * 96, 1e10}} // all, small, medium, large
)

// linspace is numpy's: n values from a to b inclusive, each computed as a + i*step.
func linspace(a, b float64, n int) []float64 {
	out := make([]float64, n)
	step := (b - a) / float64(n-1)
	for i := range out {
		out[i] = a + float64(i)*step
	}
	out[n-1] = b
	return out
}

// ReadDataset reads a ground-truth file.
func ReadDataset(path string) (Dataset, error) {
	var d Dataset
	return d, readJSON(path, &d)
}

// ReadResults reads a results file.
func ReadResults(path string) ([]Detection, error) {
	var r []Detection
	return r, readJSON(path, &r)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Evaluate computes the box metrics of dets against gt. Every detection must name an image
// of gt (COCO's loadRes refuses others); a category gt does not list is evaluated nowhere.
func Evaluate(gt Dataset, dets []Detection) (Stats, error) {
	images := map[int]bool{}
	var imgIDs []int
	for _, im := range gt.Images {
		if !images[im.ID] {
			images[im.ID] = true
			imgIDs = append(imgIDs, im.ID)
		}
	}
	for _, d := range dets {
		if !images[d.ImageID] {
			return Stats{}, fmt.Errorf("a detection names image %d, which the ground truth does not have", d.ImageID)
		}
	}
	var catIDs []int
	for _, c := range gt.Categories {
		if !slices.Contains(catIDs, c.ID) {
			catIDs = append(catIDs, c.ID)
		}
	}
	slices.Sort(imgIDs)
	slices.Sort(catIDs)

	type key struct{ img, cat int }
	gts, dts := map[key][]Annotation{}, map[key][]Detection{}
	for _, a := range gt.Annotations {
		k := key{a.ImageID, a.CategoryID}
		gts[k] = append(gts[k], a)
	}
	for _, d := range dets {
		k := key{d.ImageID, d.CategoryID}
		dts[k] = append(dts[k], d)
	}

	// precision[t][r][k][a][m] and recall[t][k][a][m], -1 where there is no ground truth.
	T, R, K, A, M := len(iouThresholds), len(recThresholds), len(catIDs), len(areaRanges), len(maxDets)
	precision := filled(T*R*K*A*M, -1)
	recall := filled(T*K*A*M, -1)
	pIdx := func(t, r, k, a, m int) int { return (((t*R+r)*K+k)*A+a)*M + m }
	rIdx := func(t, k, a, m int) int { return ((t*K+k)*A+a)*M + m }

	for k, cat := range catIDs {
		for a, rng := range areaRanges {
			evals := make([]*imageEval, 0, len(imgIDs))
			for _, img := range imgIDs {
				if e := evaluateImage(gts[key{img, cat}], dts[key{img, cat}], rng, maxDets[len(maxDets)-1]); e != nil {
					evals = append(evals, e)
				}
			}
			for m, maxDet := range maxDets {
				acc := accumulate(evals, maxDet)
				if acc == nil {
					continue
				}
				for t := range T {
					recall[rIdx(t, k, a, m)] = acc.recall[t]
					for r := range R {
						precision[pIdx(t, r, k, a, m)] = acc.precision[t][r]
					}
				}
			}
		}
	}

	// summarize: the mean over the entries that are not -1.
	ap := func(iou float64, a, m int) float64 {
		var vals []float64
		for t, thr := range iouThresholds {
			if iou >= 0 && math.Abs(thr-iou) > 1e-9 {
				continue
			}
			for r := range R {
				for k := range K {
					vals = append(vals, precision[pIdx(t, r, k, a, m)])
				}
			}
		}
		return meanValid(vals)
	}
	ar := func(a, m int) float64 {
		var vals []float64
		for t := range T {
			for k := range K {
				vals = append(vals, recall[rIdx(t, k, a, m)])
			}
		}
		return meanValid(vals)
	}
	last := M - 1
	return Stats{
		AP: ap(-1, 0, last), AP50: ap(0.5, 0, last), AP75: ap(0.75, 0, last),
		APSmall: ap(-1, 1, last), APMedium: ap(-1, 2, last), APLarge: ap(-1, 3, last),
		AR1: ar(0, 0), AR10: ar(0, 1), AR100: ar(0, 2),
		ARSmall: ar(1, last), ARMedium: ar(2, last), ARLarge: ar(3, last),
	}, nil
}

// imageEval is one image's matching for one category and size range (COCOeval.evaluateImg).
type imageEval struct {
	scores  []float64 // the detections' scores, best first
	matched [][]bool  // [threshold][detection]: matched to an object
	ignored [][]bool  // [threshold][detection]: counts neither way
	objects int       // objects that count (not crowd, in the size range)
}

// evaluateImage matches one image's detections of one category to its objects at every
// IoU threshold, best score first, each detection to the unmatched object it overlaps most
// (at least the threshold), preferring objects that count over ignored ones. It returns
// nil when the image has neither.
func evaluateImage(objs []Annotation, dets []Detection, rng [2]float64, maxDet int) *imageEval {
	if len(objs) == 0 && len(dets) == 0 {
		return nil
	}
	ignore := func(a Annotation) bool { return a.IsCrowd != 0 || a.Area < rng[0] || a.Area > rng[1] }
	// Objects that count first, in their order; then the ignored ones (a stable sort).
	objs = slices.Clone(objs)
	slices.SortStableFunc(objs, func(x, y Annotation) int { return cmp.Compare(b2i(ignore(x)), b2i(ignore(y))) })
	// Detections best score first (stable), at most maxDet.
	dets = slices.Clone(dets)
	slices.SortStableFunc(dets, func(x, y Detection) int { return cmp.Compare(y.Score, x.Score) })
	dets = dets[:min(len(dets), maxDet)]

	e := &imageEval{scores: make([]float64, len(dets))}
	for i, d := range dets {
		e.scores[i] = d.Score
	}
	for _, o := range objs {
		if !ignore(o) {
			e.objects++
		}
	}
	for _, thr := range iouThresholds {
		objMatched := make([]bool, len(objs))
		matched, ignored := make([]bool, len(dets)), make([]bool, len(dets))
		for di, d := range dets {
			best := min(thr, 1-1e-10)
			m := -1
			for oi, o := range objs {
				if objMatched[oi] && o.IsCrowd == 0 {
					continue // taken, and only a crowd takes several
				}
				if m > -1 && !ignore(objs[m]) && ignore(o) {
					break // a match that counts beats any ignored object after it
				}
				v := iou(d.BBox, o.BBox, o.IsCrowd != 0)
				if v < best {
					continue
				}
				best, m = v, oi
			}
			if m == -1 {
				continue
			}
			matched[di], ignored[di] = true, ignore(objs[m])
			objMatched[m] = true
		}
		// An unmatched detection outside the size range counts neither way.
		for di, d := range dets {
			if area := d.BBox[2] * d.BBox[3]; !matched[di] && (area < rng[0] || area > rng[1]) {
				ignored[di] = true
			}
		}
		e.matched, e.ignored = append(e.matched, matched), append(e.ignored, ignored)
	}
	return e
}

// accumulated is one category's and size range's precision at each recall threshold and
// final recall, per IoU threshold.
type accumulated struct {
	precision [][]float64
	recall    []float64
}

// accumulate ranks the detections of every image together by score (a stable sort over
// images in id order) and reads precision off the interpolated precision-recall curve at
// the 101 recall thresholds (COCOeval.accumulate). It returns nil when no object counts.
func accumulate(evals []*imageEval, maxDet int) *accumulated {
	type det struct {
		score     float64
		img, rank int
	}
	var all []det
	objects := 0
	for i, e := range evals {
		for r := range min(len(e.scores), maxDet) {
			all = append(all, det{e.scores[r], i, r})
		}
		objects += e.objects
	}
	if objects == 0 {
		return nil
	}
	slices.SortStableFunc(all, func(x, y det) int { return cmp.Compare(y.score, x.score) })

	acc := &accumulated{}
	for t := range iouThresholds {
		var tp, fp float64
		var rc, pr []float64
		for _, d := range all {
			e := evals[d.img]
			if e.ignored[t][d.rank] {
				continue
			}
			if e.matched[t][d.rank] {
				tp++
			} else {
				fp++
			}
			rc = append(rc, tp/float64(objects))
			pr = append(pr, tp/(tp+fp+eps))
		}
		final := 0.0
		if len(rc) > 0 {
			final = rc[len(rc)-1]
		}
		// The interpolated curve: precision at a recall is the best at that recall or more.
		for i := len(pr) - 1; i > 0; i-- {
			pr[i-1] = max(pr[i-1], pr[i])
		}
		q := make([]float64, len(recThresholds))
		for ri, thr := range recThresholds {
			i, _ := slices.BinarySearch(rc, thr) // numpy searchsorted, side left
			if i >= len(pr) {
				break // recall never reaches thr: precision 0 from here on
			}
			q[ri] = pr[i]
		}
		acc.precision = append(acc.precision, q)
		acc.recall = append(acc.recall, final)
	}
	return acc
}

// eps is numpy's spacing(1), which COCOeval adds to keep 0/0 out of precision.
const eps = 2.220446049250313e-16

// iou is the overlap of boxes [x, y, w, h]: intersection over union, or for a crowd object
// intersection over the detection's own area (the reference API's bbox IoU).
func iou(d, g [4]float64, crowd bool) float64 {
	w := min(d[0]+d[2], g[0]+g[2]) - max(d[0], g[0])
	h := min(d[1]+d[3], g[1]+g[3]) - max(d[1], g[1])
	if w <= 0 || h <= 0 {
		return 0
	}
	inter := w * h
	union := d[2]*d[3] + g[2]*g[3] - inter
	if crowd {
		union = d[2] * d[3]
	}
	if union <= 0 {
		return 0
	}
	return inter / union
}

func filled(n int, v float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// meanValid is the mean of the values that are not -1, or -1 when there are none.
func meanValid(vals []float64) float64 {
	sum, n := 0.0, 0
	for _, v := range vals {
		if v > -1 {
			sum += v
			n++
		}
	}
	if n == 0 {
		return -1
	}
	return sum / float64(n)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// String prints the figures as COCOeval.summarize does.
func (s Stats) String() string {
	lines := []struct {
		name, iou, area string
		dets            int
		v               float64
	}{
		{"Average Precision  (AP)", "0.50:0.95", "all", 100, s.AP},
		{"Average Precision  (AP)", "0.50     ", "all", 100, s.AP50},
		{"Average Precision  (AP)", "0.75     ", "all", 100, s.AP75},
		{"Average Precision  (AP)", "0.50:0.95", "small", 100, s.APSmall},
		{"Average Precision  (AP)", "0.50:0.95", "medium", 100, s.APMedium},
		{"Average Precision  (AP)", "0.50:0.95", "large", 100, s.APLarge},
		{"Average Recall     (AR)", "0.50:0.95", "all", 1, s.AR1},
		{"Average Recall     (AR)", "0.50:0.95", "all", 10, s.AR10},
		{"Average Recall     (AR)", "0.50:0.95", "all", 100, s.AR100},
		{"Average Recall     (AR)", "0.50:0.95", "small", 100, s.ARSmall},
		{"Average Recall     (AR)", "0.50:0.95", "medium", 100, s.ARMedium},
		{"Average Recall     (AR)", "0.50:0.95", "large", 100, s.ARLarge},
	}
	var out string
	for _, l := range lines {
		out += fmt.Sprintf(" %s @[ IoU=%s | area=%6s | maxDets=%3d ] = %.3f\n", l.name, l.iou, l.area, l.dets, l.v)
	}
	return out
}
