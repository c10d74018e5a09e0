package answer

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/locateanything/detect/engine"
)

func det(label string, x1, y1, x2, y2 int) engine.Detection {
	// On a 1000 x 500 image a coordinate v is v px across and v/2 px down.
	return engine.Detection{
		Label:   label,
		Box:     [4]float64{float64(x1), float64(y1) / 2, float64(x2), float64(y2) / 2},
		BoxNorm: [4]int{x1, y1, x2, y2},
	}
}

func point(label string, x, y int) engine.Point {
	return engine.Point{Label: label, Point: [2]float64{float64(x), float64(y) / 2}, PointNorm: [2]int{x, y}}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		dets []engine.Detection
		pts  []engine.Point
	}{
		{"one box", "<ref>car</ref><box><282><414><606><794></box><|im_end|>",
			[]engine.Detection{det("car", 282, 414, 606, 794)}, nil},
		{"several boxes per label and several labels",
			"<ref>person</ref><box><1><2><3><4></box><box><5><6><7><8></box><ref>bus</ref><box><10><20><30><40></box><|im_end|>",
			[]engine.Detection{det("person", 1, 2, 3, 4), det("person", 5, 6, 7, 8), det("bus", 10, 20, 30, 40)}, nil},
		{"None means nothing found", "<ref>dog</ref><box>None</box><|im_end|>", nil, nil},
		{"none in lower case", "<ref>dog</ref><box>none</box><ref>cat</ref><box><1><2><3><4></box>",
			[]engine.Detection{det("cat", 1, 2, 3, 4)}, nil},
		{"box without a label", "<box><1><2><3><4></box>", []engine.Detection{det("", 1, 2, 3, 4)}, nil},
		{"points", "<ref>ear</ref><box><100><200></box><box><300><400></box>", nil,
			[]engine.Point{point("ear", 100, 200), point("ear", 300, 400)}},
		{"boxes and points mixed", "<ref>a</ref><box><1><2><3><4></box><box><5><6></box>",
			[]engine.Detection{det("a", 1, 2, 3, 4)}, []engine.Point{point("a", 5, 6)}},
		{"truncated mid-box", "<ref>car</ref><box><1><2><3><4></box><box><5><6><7>",
			[]engine.Detection{det("car", 1, 2, 3, 4)}, nil},
		{"truncated inside a coordinate", "<ref>car</ref><box><1><2><3><4></box><box><5><6><7><8",
			[]engine.Detection{det("car", 1, 2, 3, 4)}, nil},
		{"truncated inside a label", "<ref>car</ref><box><1><2><3><4></box><ref>bu",
			[]engine.Detection{det("car", 1, 2, 3, 4)}, nil},
		{"box interrupted by another", "<box><1><2><box><3><4><5><6></box>",
			[]engine.Detection{det("", 3, 4, 5, 6)}, nil},
		{"stray text ignored", "Sure! Here: <ref>car</ref> found <box><1><2><3><4></box> done.",
			[]engine.Detection{det("car", 1, 2, 3, 4)}, nil},
		{"swapped corners", "<box><606><794><282><414></box>", []engine.Detection{det("", 282, 414, 606, 794)}, nil},
		{"values over 1000 clamped", "<box><0><1><1234><99999999999999999999></box>",
			[]engine.Detection{det("", 0, 1, 1000, 1000)}, nil},
		{"exact repeats dropped", "<ref>car</ref><box><1><2><3><4></box><box><1><2><3><4></box><box><1><2><3><4></box>",
			[]engine.Detection{det("car", 1, 2, 3, 4)}, nil},
		{"same box under another label kept", "<ref>a</ref><box><1><2><3><4></box><ref>b</ref><box><1><2><3><4></box>",
			[]engine.Detection{det("a", 1, 2, 3, 4), det("b", 1, 2, 3, 4)}, nil},
		{"repeated point dropped", "<box><7><8></box><box><7><8></box>", nil, []engine.Point{point("", 7, 8)}},
		{"label trimmed", "<ref> traffic light </ref><box><1><2><3><4></box>",
			[]engine.Detection{det("traffic light", 1, 2, 3, 4)}, nil},
		{"label without </ref>", "<ref>car<box><1><2><3><4></box>", []engine.Detection{det("car", 1, 2, 3, 4)}, nil},
		{"whitespace between coordinates", "<box> <1> <2>\n<3><4> </box>", []engine.Detection{det("", 1, 2, 3, 4)}, nil},
		{"wrong coordinate counts skipped", "<box><1></box><box><1><2><3></box><box><1><2><3><4><5></box>", nil, nil},
		{"malformed coordinates skipped", "<box><1><x><3><4></box><box><-1><2></box><box><><2></box><box>1 2 3 4</box>", nil, nil},
		{"text after <|im_end|> ignored", "<box><1><2><3><4></box><|im_end|><box><5><6><7><8></box>",
			[]engine.Detection{det("", 1, 2, 3, 4)}, nil},
		{"empty", "", nil, nil},
		{"only end of turn", "<|im_end|>", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dets, pts := Parse(tt.raw, 1000, 500)
			wantDets, wantPts := tt.dets, tt.pts
			if wantDets == nil {
				wantDets = []engine.Detection{}
			}
			if wantPts == nil {
				wantPts = []engine.Point{}
			}
			if !reflect.DeepEqual(dets, wantDets) {
				t.Errorf("detections\n got %+v\nwant %+v", dets, wantDets)
			}
			if !reflect.DeepEqual(pts, wantPts) {
				t.Errorf("points\n got %+v\nwant %+v", pts, wantPts)
			}
		})
	}
}

func TestParsePixels(t *testing.T) {
	// The worked example: a 1920x1080 photo.
	dets, _ := Parse("<ref>car</ref><box><282><414><606><794></box>", 1920, 1080)
	if len(dets) != 1 {
		t.Fatalf("got %d detections", len(dets))
	}
	want := [4]float64{541.44, 447.12, 1163.52, 857.52}
	if dets[0].Box != want {
		t.Errorf("box = %v, want %v", dets[0].Box, want)
	}
	// Rounded to 2 decimals: 333/1000*7 = 2.331.
	dets, _ = Parse("<box><333><333><1000><1000></box>", 7, 7)
	if want := [4]float64{2.33, 2.33, 7, 7}; dets[0].Box != want {
		t.Errorf("box = %v, want %v", dets[0].Box, want)
	}
	// A non-positive size cannot hold a box; coordinates collapse to 0 rather than going negative.
	dets, _ = Parse("<box><1><2><3><4></box>", -5, 0)
	if want := [4]float64{0, 0, 0, 0}; dets[0].Box != want {
		t.Errorf("box on a -5x0 image = %v, want %v", dets[0].Box, want)
	}
}

func TestParseEncodesEmptyListsAsArrays(t *testing.T) {
	dets, pts := Parse("<ref>dog</ref><box>None</box>", 10, 10)
	for field, list := range map[string]any{"detections": dets, "points": pts} {
		out, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != "[]" {
			t.Errorf("%s encode as %s, want [] (both contracts write empty lists, never null)", field, out)
		}
	}
}

// generated lays tokens end to end as the engine does (tokenizer.DecodeEnds): the text and
// where each token ends.
func generated(pieces ...string) (raw string, ends []int) {
	for _, p := range pieces {
		raw += p
		ends = append(ends, len(raw))
	}
	return raw, ends
}

func TestParseScored(t *testing.T) {
	geo := func(ps ...float64) float64 {
		s := 0.0
		for _, p := range ps {
			s += math.Log(p)
		}
		return math.Round(math.Exp(s/float64(len(ps)))*1e4) / 1e4
	}
	raw, ends := generated("<ref>", "car", "</ref>", "<box>", "<1>", "<2>", "<3>", "<4>", "</box>", // a box
		"<box>", "<5>", " ", "<6>", "</box>", // a point, a whitespace token inside
		"<ref>", "dog", "</ref>", "<box>", "None", "</box>", // nothing found: no score to give
		"<ref>", "cat", "</ref>", "<box>", "<1>", "<2>", "<3>", "<4>", "</box>", // same box, another label
		"<box>", "<1>", "<2>", "<3>", "<4>", "</box>", // an exact repeat: dropped, the first kept
		"<|im_end|>")
	probs := []float32{0.99, 0.9, 0.99, 0.5, 0.8, 0.4, 0.9, 0.2, 0.99,
		0.6, 0.3, 0.01, 0.7, 0.9,
		0.9, 0.9, 0.9, 0.9, 0.8, 0.9,
		0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9,
		0.9, 0.1, 0.1, 0.1, 0.1, 0.9,
		0.95}
	dets, pts := ParseScored(raw, ends, probs, 1000, 500)
	if len(dets) != 2 || len(pts) != 1 {
		t.Fatalf("%d detections, %d points: %+v %+v", len(dets), len(pts), dets, pts)
	}
	// The coordinates' tokens make the score: not <box>, </box>, the label or whitespace.
	for i, want := range []float64{geo(0.8, 0.4, 0.9, 0.2), geo(0.9, 0.9, 0.9, 0.9)} {
		if got := dets[i].Score; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: score %v, want %v", dets[i].Label, got, want)
		}
	}
	if got, want := pts[0].Score, geo(0.3, 0.7); math.Abs(got-want) > 1e-12 {
		t.Errorf("point score %v, want %v", got, want)
	}
	// Everything but the scores is what Parse reads.
	pd, pp := Parse(raw, 1000, 500)
	for i := range dets {
		if pd[i].Score != 0 {
			t.Errorf("Parse gave a score without probabilities: %+v", pd[i])
		}
		pd[i].Score = dets[i].Score
	}
	pp[0].Score = pts[0].Score
	if !reflect.DeepEqual(pd, dets) || !reflect.DeepEqual(pp, pts) {
		t.Errorf("ParseScored %+v %+v, Parse %+v %+v", dets, pts, pd, pp)
	}

	// A coordinate the model gave no chance makes the box's score 0.
	probs[5] = 0
	if d, _ := ParseScored(raw, ends, probs, 1000, 500); d[0].Score != 0 {
		t.Errorf("a zero-probability coordinate: score %v, want 0", d[0].Score)
	}
	// Tokens spanning tags: a coordinate token written in two pieces counts as both.
	raw2, ends2 := generated("<box><1", "0><2><3><4></box>")
	if d, _ := ParseScored(raw2, ends2, []float32{0.25, 1}, 1000, 500); len(d) != 1 || d[0].Score != 0.5 {
		t.Errorf("two tokens over one box: %+v, want score 0.5", d)
	}
	// Probabilities that do not describe the text are not used.
	for name, bad := range map[string]struct {
		ends  []int
		probs []float32
	}{
		"fewer probabilities":    {ends, probs[1:]},
		"ends short of the text": {ends[:len(ends)-1], probs[:len(probs)-1]},
		"ends out of order":      {append([]int{5, 3}, ends[2:]...), probs},
	} {
		d, _ := ParseScored(raw, bad.ends, bad.probs, 1000, 500)
		if len(d) != 2 || d[0].Score != 0 || d[1].Score != 0 {
			t.Errorf("%s: %+v, want the boxes with score 0", name, d)
		}
	}
}
