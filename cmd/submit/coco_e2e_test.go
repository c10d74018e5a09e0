package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/submit"
	"github.com/locateanything/detect/tools/cocoeval"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// cocoScenes is how many shape scenes the COCO test draws; minCOCOAP is its floor for
// AP at IoU 0.50:0.95, set below what the bundled model measured on them (docs/scores.md).
const (
	cocoScenes = 160
	minCOCOAP  = 0.20 // measured 0.281
)

// TestCOCOExportEvaluatesAgainstTheTruth is the COCO export as an evaluation tool takes
// it: a real worker (the jobs.Runner on the bundled model and the C engine) answers fresh
// shape scenes listed in a manifest, `submit --coco` exports them, and the independent
// evaluator in tools/cocoeval scores detections.results.json against the scenes' true
// boxes, laid out on the export's own image and category ids. The scores must rank true
// boxes above false ones (AP falls when they are turned upside down), and a rerun
// must write the same files.
func TestCOCOExportEvaluatesAgainstTheTruth(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts NATS, versitygw and a worker on the bundled model")
	}
	root := t.TempDir()
	// 48 tokens: what the model was trained to answer in.
	sys := startSystem(t, nil, systemOptions{fileRoot: root, engine: modelEngine("../../models/tiny-shapes", 1, 48)})

	// Scenes with a detect query of one or two categories each, as the model was trained.
	scenesDir := filepath.Join(root, "scenes")
	must(t, os.MkdirAll(scenesDir, 0o755))
	var manifest bytes.Buffer
	type scene struct {
		s     shapes.Scene
		cats  []string
		query string
	}
	var scenes []scene
	for i := range cocoScenes {
		r := rand.New(rand.NewPCG(14, uint64(i)))
		s := shapes.NewScene(r)
		q := shapes.NewQuery(r, s)
		for q.Task != "detect" {
			q = shapes.NewQuery(r, s)
		}
		name := fmt.Sprintf("scene-%02d.png", i)
		var buf bytes.Buffer
		must(t, png.Encode(&buf, s.Image))
		must(t, os.WriteFile(filepath.Join(scenesDir, name), buf.Bytes(), 0o644))
		line, _ := json.Marshal(map[string]string{"image": name, "query": q.Text})
		manifest.Write(append(line, '\n'))
		scenes = append(scenes, scene{s, strings.Split(q.Text, "</c>"), q.Text})
	}
	manifestPath := filepath.Join(scenesDir, "manifest.jsonl")
	must(t, os.WriteFile(manifestPath, manifest.Bytes(), 0o644))

	out := filepath.Join(root, "out")
	code, stdout, _ := sys.submit(t, "--out", out, "--coco", manifestPath)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stdout)
	}
	var export submit.COCODataset
	exportRaw, err := os.ReadFile(filepath.Join(out, submit.COCOFile))
	must(t, err)
	must(t, json.Unmarshal(exportRaw, &export))
	resultsRaw, err := os.ReadFile(filepath.Join(out, submit.COCOResultsFile))
	must(t, err)

	// Categories: the manifest's queries, in order of first appearance.
	var wantCats []string
	for _, sc := range scenes {
		for _, c := range sc.cats {
			if !slices.Contains(wantCats, c) {
				wantCats = append(wantCats, c)
			}
		}
	}
	catID := map[string]int{}
	for i, c := range export.Categories {
		catID[c.Name] = c.ID
		if i >= len(wantCats) || c.Name != wantCats[i] || c.ID != i+1 {
			t.Errorf("category %d is %+v, want %q with id %d", i, c, wantCats[min(i, len(wantCats)-1)], i+1)
		}
	}
	if len(export.Categories) != len(wantCats) {
		t.Fatalf("%d categories, want the queries' %d", len(export.Categories), len(wantCats))
	}
	// Images: the manifest's order, named as below the manifest's folder.
	if len(export.Images) != cocoScenes {
		t.Fatalf("%d images, want %d", len(export.Images), cocoScenes)
	}
	for i, im := range export.Images {
		b := scenes[i].s.Image.Bounds()
		if im.ID != i+1 || im.FileName != fmt.Sprintf("scene-%02d.png", i) || im.Width != b.Dx() || im.Height != b.Dy() {
			t.Errorf("image %d: %+v, want id %d, scene-%02d.png, %dx%d", i, im, i+1, i, b.Dx(), b.Dy())
		}
	}

	// The truth, on the export's ids: for each scene, the objects of each category its
	// query asked for. A category a scene was not asked about has neither truth nor
	// detections there, so it counts nowhere (as in a federated dataset).
	gt := cocoeval.Dataset{}
	for _, c := range export.Categories {
		gt.Categories = append(gt.Categories, cocoeval.Category{ID: c.ID, Name: c.Name})
	}
	for i, sc := range scenes {
		gt.Images = append(gt.Images, cocoeval.Image{ID: i + 1})
		for _, c := range sc.cats {
			for _, o := range sc.s.Objects {
				if shapes.Matches(o, c) {
					w, h := o.Box[2]-o.Box[0], o.Box[3]-o.Box[1]
					gt.Annotations = append(gt.Annotations, cocoeval.Annotation{ID: len(gt.Annotations) + 1, ImageID: i + 1,
						CategoryID: catID[c], BBox: [4]float64{o.Box[0], o.Box[1], w, h}, Area: w * h})
				}
			}
		}
	}
	var dets []cocoeval.Detection
	must(t, json.Unmarshal(resultsRaw, &dets))
	if len(dets) != len(export.Annotations) || len(dets) == 0 {
		t.Fatalf("%d results, %d annotations in the dataset", len(dets), len(export.Annotations))
	}
	stats, err := cocoeval.Evaluate(gt, dets)
	must(t, err)
	t.Logf("%d scenes, %d true objects, %d boxes:\n%s", cocoScenes, len(gt.Annotations), len(dets), stats)
	if stats.AP < minCOCOAP {
		t.Errorf("AP %.3f, want at least %.2f", stats.AP, minCOCOAP)
	}
	// The scores carry the ranking: the same boxes ranked without them (all equal: in
	// image order) or against them (upside down) do worse.
	rescored := func(f func(float64) float64) cocoeval.Stats {
		d := slices.Clone(dets)
		for i := range d {
			d[i].Score = f(d[i].Score)
		}
		s, err := cocoeval.Evaluate(gt, d)
		must(t, err)
		return s
	}
	equal, worse := rescored(func(float64) float64 { return 1 }), rescored(func(v float64) float64 { return 1 - v })
	t.Logf("AP (AP50): %.3f (%.3f) by score, %.3f (%.3f) all scores equal, %.3f (%.3f) upside down",
		stats.AP, stats.AP50, equal.AP, equal.AP50, worse.AP, worse.AP50)
	for name, c := range map[string]struct {
		other  cocoeval.Stats
		margin float64
	}{"all scores equal": {equal, 0.01}, "scores upside down": {worse, 0.03}} { // measured 0.025 and 0.049
		if other := c.other; !(stats.AP > other.AP+c.margin && stats.AP50 > other.AP50+c.margin) {
			t.Errorf("AP %.3f (AP50 %.3f) with the scores, %.3f (%.3f) with %s: the scores do not rank true boxes first",
				stats.AP, stats.AP50, c.other.AP, c.other.AP50, name)
		}
	}

	// A rerun finds everything done and writes the same files.
	code, stdout, _ = sys.submit(t, "--out", out, "--coco", manifestPath)
	if code != ExitOK || !strings.Contains(stdout, fmt.Sprintf("0 submitted, %d already done", cocoScenes)) {
		t.Fatalf("rerun: exit %d, %q", code, stdout)
	}
	for name, before := range map[string][]byte{submit.COCOFile: exportRaw, submit.COCOResultsFile: resultsRaw} {
		after, err := os.ReadFile(filepath.Join(out, name))
		must(t, err)
		if !reflect.DeepEqual(after, before) {
			t.Errorf("%s changed on a rerun", name)
		}
	}
}
