package cocoeval

import (
	"math"
	"strings"
	"testing"
)

// box is an object of category 1 on image img, its area the box's.
func box(id, img int, x, y, w, h float64) Annotation {
	return Annotation{ID: id, ImageID: img, CategoryID: 1, BBox: [4]float64{x, y, w, h}, Area: w * h}
}

func det(img int, x, y, w, h, score float64) Detection {
	return Detection{ImageID: img, CategoryID: 1, BBox: [4]float64{x, y, w, h}, Score: score}
}

func dataset(objs ...Annotation) Dataset {
	return Dataset{Images: []Image{{1}, {2}}, Categories: []Category{{1, "thing"}, {2, "other"}}, Annotations: objs}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The cases are worked by hand from the definition; the comments show the working.
func TestEvaluateHandCheckedCases(t *testing.T) {
	big := func(id, img int, x float64) Annotation { return box(id, img, x, 0, 100, 100) } // large: 10000 px
	for _, c := range []struct {
		name string
		gt   Dataset
		dets []Detection
		want Stats // every figure is checked; -1 where nothing counts
	}{
		{
			// Every object found exactly: precision 1 at every recall and threshold.
			name: "perfect",
			gt:   dataset(big(1, 1, 0), big(2, 2, 200)),
			dets: []Detection{det(1, 0, 0, 100, 100, 0.9), det(2, 200, 0, 100, 100, 0.8)},
			want: Stats{1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1, 1},
		},
		{
			// One object, one box shifted by 16 px: IoU 84*100/(2*10000-8400) = 0.7241.
			// It matches at the 5 thresholds 0.50..0.70 and misses at 0.75..0.95, so
			// AP = 5/10, AP50 = 1, AP75 = 0, and recall likewise 0.5.
			name: "IoU 0.72",
			gt:   dataset(big(1, 1, 0)),
			dets: []Detection{det(1, 16, 0, 100, 100, 0.9)},
			want: Stats{0.5, 1, 0, -1, -1, 0.5, 0.5, 0.5, 0.5, -1, -1, 0.5},
		},
		{
			// Two objects, three boxes, the false one ranked first: at each detection
			// (recall, precision) = (0, 0), (0.5, 0.5), (1, 0.667). Interpolated, the
			// precision is 2/3 at every recall threshold: AP = 2/3. With one box per image
			// (AR1), image 1 keeps only its false box: recall 0.5.
			name: "a false box ranked first",
			gt:   dataset(big(1, 1, 0), big(2, 2, 0)),
			dets: []Detection{det(1, 500, 500, 100, 100, 0.9), det(1, 0, 0, 100, 100, 0.8), det(2, 0, 0, 100, 100, 0.7)},
			want: Stats{2. / 3, 2. / 3, 2. / 3, -1, -1, 2. / 3, 0.5, 1, 1, -1, -1, 1},
		},
		{
			// The same boxes with the false one ranked last: (0.5, 1), (1, 1), (1, 0.667):
			// precision 1 up to recall 1. The score is what tells the two apart. With one
			// box per image (AR1) each image keeps its best, the true one: recall 1.
			name: "a false box ranked last",
			gt:   dataset(big(1, 1, 0), big(2, 2, 0)),
			dets: []Detection{det(1, 500, 500, 100, 100, 0.1), det(1, 0, 0, 100, 100, 0.8), det(2, 0, 0, 100, 100, 0.7)},
			want: Stats{1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1, 1},
		},
		{
			// Equal scores keep the detections' order (a stable sort, as numpy's
			// mergesort): image 1's false box comes before image 2's true one, so this
			// is "a false box ranked first" again for the second object: (0.5, 1), (0.5,
			// 0.5), (1, 0.667) interpolates to 1 up to recall 0.5 (51 thresholds) and
			// 2/3 above (50): AP = (51 + 50*2/3)/101. Each image's best box is true: AR1 1.
			name: "ties keep their order",
			gt:   dataset(big(1, 1, 0), big(2, 2, 0)),
			dets: []Detection{det(1, 0, 0, 100, 100, 0.9), det(1, 500, 500, 100, 100, 0.5), det(2, 0, 0, 100, 100, 0.5)},
			want: Stats{(51 + 50*2./3) / 101, (51 + 50*2./3) / 101, (51 + 50*2./3) / 101, -1, -1, (51 + 50*2./3) / 101, 1, 1, 1, -1, -1, 1},
		},
		{
			// Two boxes on one object: the better-scored one matches, the other is
			// false: (1, 1) then (1, 0.5): AP 1. A second box can only lower precision
			// after full recall, where nothing is read.
			name: "a duplicate after the match",
			gt:   dataset(big(1, 1, 0)),
			dets: []Detection{det(1, 0, 0, 100, 100, 0.9), det(1, 2, 0, 100, 100, 0.8)},
			want: Stats{1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1, 1},
		},
		{
			// Sizes: a small object (20x20 = 400 < 32^2) and a medium one (50x50), both
			// found. AP small and medium are 1, large has no object: -1.
			name: "sizes",
			gt:   dataset(box(1, 1, 0, 0, 20, 20), box(2, 1, 100, 100, 50, 50)),
			dets: []Detection{det(1, 0, 0, 20, 20, 0.9), det(1, 100, 100, 50, 50, 0.8)},
			want: Stats{1, 1, 1, 1, 1, -1, 0.5, 1, 1, 1, 1, -1},
		},
		{
			// A box of the wrong category is false for its own category, which has no
			// objects (-1, left out of the mean), and the object is missed: AP 0.
			name: "wrong category",
			gt:   dataset(big(1, 1, 0)),
			dets: []Detection{{ImageID: 1, CategoryID: 2, BBox: [4]float64{0, 0, 100, 100}, Score: 0.9}},
			want: Stats{0, 0, 0, -1, -1, 0, 0, 0, 0, -1, -1, 0},
		},
		{
			// A crowd object is never missed, and a box on it counts neither way: the
			// other object, found, gives AP 1 despite the higher-scored crowd box.
			name: "crowd",
			gt: dataset(Annotation{ID: 1, ImageID: 1, CategoryID: 1, BBox: [4]float64{0, 0, 300, 300}, Area: 90000, IsCrowd: 1},
				big(2, 2, 0)),
			dets: []Detection{det(1, 0, 0, 100, 100, 0.9), det(2, 0, 0, 100, 100, 0.8)},
			want: Stats{1, 1, 1, -1, -1, 1, 1, 1, 1, -1, -1, 1},
		},
		{
			// Nothing detected: AP and AR 0 where there are objects.
			name: "nothing",
			gt:   dataset(big(1, 1, 0)),
			want: Stats{0, 0, 0, -1, -1, 0, 0, 0, 0, -1, -1, 0},
		},
	} {
		got, err := Evaluate(c.gt, c.dets)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		g := []float64{got.AP, got.AP50, got.AP75, got.APSmall, got.APMedium, got.APLarge, got.AR1, got.AR10, got.AR100, got.ARSmall, got.ARMedium, got.ARLarge}
		w := []float64{c.want.AP, c.want.AP50, c.want.AP75, c.want.APSmall, c.want.APMedium, c.want.APLarge, c.want.AR1, c.want.AR10, c.want.AR100, c.want.ARSmall, c.want.ARMedium, c.want.ARLarge}
		for i := range g {
			if !near(g[i], w[i]) {
				t.Errorf("%s: stat %d = %v, want %v\n%s", c.name, i, g[i], w[i], got)
			}
		}
	}
}

// TestMaxDetsCutsEachImage: recall at 1 detection per image counts each image's best box
// only. Two objects on one image, both found: AR1 = 0.5, AR10 = 1.
func TestMaxDetsCutsEachImage(t *testing.T) {
	gt := dataset(box(1, 1, 0, 0, 100, 100), box(2, 1, 200, 0, 100, 100))
	got, err := Evaluate(gt, []Detection{det(1, 0, 0, 100, 100, 0.9), det(1, 200, 0, 100, 100, 0.8)})
	if err != nil {
		t.Fatal(err)
	}
	if !near(got.AR1, 0.5) || !near(got.AR10, 1) || !near(got.AP, 1) {
		t.Errorf("AR1 %v AR10 %v AP %v, want 0.5, 1, 1", got.AR1, got.AR10, got.AP)
	}
}

func TestEvaluateRefusesUnknownImages(t *testing.T) {
	_, err := Evaluate(dataset(), []Detection{det(7, 0, 0, 1, 1, 1)})
	if err == nil || !strings.Contains(err.Error(), "image 7") {
		t.Fatalf("err = %v, want one naming image 7", err)
	}
}

func TestStatsPrintLikeCOCOeval(t *testing.T) {
	s := Stats{AP: 0.5, APSmall: -1}.String()
	for _, want := range []string{
		" Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.500\n",
		" Average Precision  (AP) @[ IoU=0.50:0.95 | area= small | maxDets=100 ] = -1.000\n",
		" Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets=  1 ] = 0.000\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}
