package answer

import "testing"

// FuzzParse checks that Parse never panics and that every box and point it returns lies
// inside the image, with ordered corners and normalized values in 0..1000.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"<ref>car</ref><box><282><414><606><794></box><|im_end|>",
		"<ref>dog</ref><box>None</box>", "<box><1><2></box>", "<box><1000><1001><5><0></box>",
		"<ref>a<box><1><2><3><box><4>", "<box><99999999999999999999999><1><2><3></box>", "</box><ref></ref>",
	} {
		f.Add(s, 1920, 1080)
	}
	f.Add("<box><999><1><1000><3></box>", 1<<62+1, -1)
	f.Fuzz(func(t *testing.T, raw string, w, h int) {
		dets, pts := Parse(raw, w, h)
		fw, fh := float64(max(w, 0)), float64(max(h, 0))
		for _, d := range dets {
			b, n := d.Box, d.BoxNorm
			if !(0 <= b[0] && b[0] <= b[2] && b[2] <= fw && 0 <= b[1] && b[1] <= b[3] && b[3] <= fh) {
				t.Fatalf("Parse(%q, %d, %d): box %v outside the image or unordered", raw, w, h, b)
			}
			if !(0 <= n[0] && n[0] <= n[2] && n[2] <= MaxCoord && 0 <= n[1] && n[1] <= n[3] && n[3] <= MaxCoord) {
				t.Fatalf("Parse(%q, %d, %d): box_norm %v out of range or unordered", raw, w, h, n)
			}
		}
		for _, p := range pts {
			if !(0 <= p.Point[0] && p.Point[0] <= fw && 0 <= p.Point[1] && p.Point[1] <= fh) {
				t.Fatalf("Parse(%q, %d, %d): point %v outside the image", raw, w, h, p.Point)
			}
			if !(0 <= p.PointNorm[0] && p.PointNorm[0] <= MaxCoord && 0 <= p.PointNorm[1] && p.PointNorm[1] <= MaxCoord) {
				t.Fatalf("Parse(%q, %d, %d): point_norm %v out of range", raw, w, h, p.PointNorm)
			}
		}
	})
}
