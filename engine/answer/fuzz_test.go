package answer

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
)

// FuzzParse checks that Parse never panics and that what it returns holds whatever the
// text: both lists non-nil; every box and point inside the image, with ordered corners and
// normalized values in 0..1000 that the pixel values are the image-size share of; labels
// taken from the text; no repeats; at most one result per <box>; and nothing after the end
// of the turn counts. ParseScored, given the text as tokens of a few bytes each, reads the
// same and scores every result in [0, 1].
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"<ref>car</ref><box><282><414><606><794></box><|im_end|>",
		"<ref>person</ref><box><12><40><300><990></box><box><1><2><3><4></box><ref>bus</ref><box>None</box><|im_end|>",
		"<ref>dog</ref><box>None</box>", "<box><1><2></box>", "<box><1000><1001><5><0></box>",
		"<ref>a<box><1><2><3><box><4>", "<box><99999999999999999999999><1><2><3></box>", "</box><ref></ref>",
		"<ref> a </ref><box> <1>\t<2> </box><box><1><2></box><box><2><1></box>",
	} {
		f.Add(s, 1920, 1080)
	}
	// What the tiny checkpoint answered for held-out scenes (the worker's and PyTorch's).
	for _, s := range heldoutAnswers(f) {
		f.Add(s.text, s.w, s.h)
	}
	f.Add("<box><999><1><1000><3></box>", 1<<62+1, -1)
	f.Fuzz(func(t *testing.T, raw string, w, h int) {
		dets, pts := Parse(raw, w, h)
		if dets == nil || pts == nil {
			t.Fatalf("Parse(%q): nil list", raw)
		}
		if n := len(dets) + len(pts); n > strings.Count(raw, boxStart) {
			t.Fatalf("Parse(%q): %d results from %d boxes", raw, n, strings.Count(raw, boxStart))
		}
		fw, fh := float64(max(w, 0)), float64(max(h, 0))
		seen := map[string]bool{}
		for _, d := range dets {
			b, n := d.Box, d.BoxNorm
			if !(0 <= b[0] && b[0] <= b[2] && b[2] <= fw && 0 <= b[1] && b[1] <= b[3] && b[3] <= fh) {
				t.Fatalf("Parse(%q, %d, %d): box %v outside the image or unordered", raw, w, h, b)
			}
			if !(0 <= n[0] && n[0] <= n[2] && n[2] <= MaxCoord && 0 <= n[1] && n[1] <= n[3] && n[3] <= MaxCoord) {
				t.Fatalf("Parse(%q, %d, %d): box_norm %v out of range or unordered", raw, w, h, n)
			}
			for i, size := range []float64{fw, fh, fw, fh} {
				checkPixel(t, raw, b[i], n[i], size)
			}
			checkLabel(t, raw, d.Label, seen, "box", n)
		}
		for _, p := range pts {
			if !(0 <= p.Point[0] && p.Point[0] <= fw && 0 <= p.Point[1] && p.Point[1] <= fh) {
				t.Fatalf("Parse(%q, %d, %d): point %v outside the image", raw, w, h, p.Point)
			}
			if !(0 <= p.PointNorm[0] && p.PointNorm[0] <= MaxCoord && 0 <= p.PointNorm[1] && p.PointNorm[1] <= MaxCoord) {
				t.Fatalf("Parse(%q, %d, %d): point_norm %v out of range", raw, w, h, p.PointNorm)
			}
			checkPixel(t, raw, p.Point[0], p.PointNorm[0], fw)
			checkPixel(t, raw, p.Point[1], p.PointNorm[1], fh)
			checkLabel(t, raw, p.Label, seen, "point", p.PointNorm)
		}
		checkScored(t, raw, w, h, dets, pts)
		if !strings.Contains(raw, eos) {
			d2, p2 := Parse(raw+eos+"<ref>x</ref><box><1><2><3><4></box><box><5><6></box>", w, h)
			if !reflect.DeepEqual(d2, dets) || !reflect.DeepEqual(p2, pts) {
				t.Fatalf("Parse(%q): what follows %s changes the answer", raw, eos)
			}
		}
	})
}

// checkScored: ParseScored over raw cut into tokens of 1-4 bytes reads what Parse read,
// with scores in [0, 1].
func checkScored(t *testing.T, raw string, w, h int, dets []engine.Detection, pts []engine.Point) {
	t.Helper()
	var ends []int
	var probs []float32
	for end := 0; end < len(raw); {
		end = min(end+1+len(ends)%4, len(raw))
		ends = append(ends, end)
		probs = append(probs, float32(1+len(ends)%7)/7)
	}
	sd, sp := ParseScored(raw, ends, probs, w, h)
	if len(sd) != len(dets) || len(sp) != len(pts) {
		t.Fatalf("ParseScored(%q): %d boxes and %d points, Parse %d and %d", raw, len(sd), len(sp), len(dets), len(pts))
	}
	for i, d := range sd {
		if !(0 <= d.Score && d.Score <= 1) {
			t.Fatalf("ParseScored(%q): box score %v", raw, d.Score)
		}
		if d.Score = 0; d != dets[i] {
			t.Fatalf("ParseScored(%q): box %+v, Parse %+v", raw, d, dets[i])
		}
	}
	for i, p := range sp {
		if !(0 <= p.Score && p.Score <= 1) {
			t.Fatalf("ParseScored(%q): point score %v", raw, p.Score)
		}
		if p.Score = 0; p != pts[i] {
			t.Fatalf("ParseScored(%q): point %+v, Parse %+v", raw, p, pts[i])
		}
	}
}

// checkPixel: v is norm/1000 of size, rounded to 2 decimals.
func checkPixel(t *testing.T, raw string, v float64, norm int, size float64) {
	t.Helper()
	if want := float64(norm) / MaxCoord * size; math.Abs(v-want) > 0.005+1e-9*size {
		t.Fatalf("Parse(%q): %v for %d/1000 of %v", raw, v, norm, size)
	}
}

// checkLabel: a label is trimmed text of raw, and a (kind, label, coordinates) comes once.
func checkLabel(t *testing.T, raw, label string, seen map[string]bool, kind string, norm any) {
	t.Helper()
	if !strings.Contains(raw, label) || label != strings.TrimSpace(label) {
		t.Fatalf("Parse(%q): label %q is not trimmed text of the answer", raw, label)
	}
	key, _ := json.Marshal([]any{kind, label, norm})
	if seen[string(key)] {
		t.Fatalf("Parse(%q): %s repeated", raw, key)
	}
	seen[string(key)] = true
}

type heldoutAnswer struct {
	text string
	w, h int
}

// heldoutAnswers reads the answers recorded in tools/tinymodel/testdata/heldout.json, the
// first dozen distinct ones.
func heldoutAnswers(tb testing.TB) []heldoutAnswer {
	data, err := os.ReadFile("../../tools/tinymodel/testdata/heldout.json")
	if err != nil {
		tb.Fatal(err)
	}
	var v struct {
		Scenes []struct {
			Answer    string `json:"answer"`
			TorchText string `json:"torch_text"`
			Width     int    `json:"width"`
			Height    int    `json:"height"`
		} `json:"scenes"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		tb.Fatal(err)
	}
	var out []heldoutAnswer
	seen := map[string]bool{}
	for _, s := range v.Scenes {
		for _, text := range []string{s.Answer, s.TorchText} {
			if text != "" && !seen[text] && len(out) < 12 {
				seen[text] = true
				out = append(out, heldoutAnswer{text, s.Width, s.Height})
			}
		}
	}
	return out
}

// TestParseTakesLinearTime: a megabyte of broken elements, each reaching for a closing tag
// that never comes, parses in milliseconds (it took minutes when each element searched
// the rest of the text for its closing tag).
func TestParseTakesLinearTime(t *testing.T) {
	for name, raw := range map[string]string{
		"open boxes":         strings.Repeat("<box>", 200_000),
		"open boxes, values": strings.Repeat("<box><1>", 120_000),
		"open refs":          strings.Repeat("<ref>a", 160_000) + "x",
		"refs and boxes":     strings.Repeat("<ref>a<box>", 90_000),
		"stray text":         strings.Repeat("<boxes <ref ", 90_000),
	} {
		start := time.Now()
		Parse(raw, 1920, 1080)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: %d bytes took %v", name, len(raw), d)
		}
	}
}
