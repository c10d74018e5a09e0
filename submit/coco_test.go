package submit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/jobs"
)

// cocoRow is a succeeded result of job id, made from source, with boxes.
func cocoRow(id, source string, finished time.Time, dets ...engine.Detection) Row {
	return Row{Source: source, Result: jobs.Result{
		Answer: jobs.Answer{Width: 200, Height: 100, Detections: dets, Points: []engine.Point{}},
		ID:     id, Status: jobs.StatusSucceeded, Model: "tiny-shapes", FinishedAt: finished,
	}}
}

func cocoDet(label string, x1, y1, x2, y2, score float64) engine.Detection {
	return engine.Detection{Label: label, Box: [4]float64{x1, y1, x2, y2}, Score: score}
}

// writeRows writes rows as results.jsonl in a new directory.
func writeRows(t *testing.T, rows ...Row) string {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readCOCO(t *testing.T, dir string) (COCODataset, []COCOResult, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, COCOFile))
	if err != nil {
		t.Fatal(err)
	}
	var f COCODataset
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, COCOResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var res []COCOResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return f, res, raw
}

// TestCOCOExportIsStable: categories come from the queries (a manifest's union, in order
// of first appearance), image ids from the order of the inputs whatever order the results
// came in, file names are the images' paths below their input; boxes are [x, y, w, h]
// rounded to 2 decimals, scores kept to 4; boxes under a label that is no category, rows of
// jobs outside the run's set and failed rows stay out; writing twice gives the same bytes.
func TestCOCOExportIsStable(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	items := []Item{
		{Image: "/in/a.png", Rel: "cam1/a.png", Origin: "m.jsonl:1", Query: "red circle</c>blue square"},
		{Image: "/in/b.png", Rel: "cam1/b.png", Origin: "m.jsonl:2", Query: " blue square </c>star</c>"},
		{Image: "/in/a.png", Rel: "cam1/a.png", Origin: "m.jsonl:3", Query: "star"}, // a again, another query
		{Image: "/in/c.png", Rel: "cam2/c.png", Origin: "m.jsonl:4"},                // --query, fails
		{Image: "/in/d.png", Rel: "cam2/d.png", Origin: "m.jsonl:5", Task: engine.TaskGround, Query: "the big one"},
	}
	set := cocoSet{Items: items, Defaults: JobDefaults{Query: "yellow star"}, Jobs: map[string]bool{"ja": true, "jb": true, "ja2": true, "jc": true, "jd": true}}
	failed := Row{Source: "m.jsonl:4", Result: jobs.Result{ID: "jc", Status: jobs.StatusFailed}}
	rows := []Row{ // in the order results came in
		cocoRow("jd", "m.jsonl:5", t0, cocoDet("the big one", 1, 2, 3, 4, 0.5)),
		cocoRow("ja2", "m.jsonl:3", t0.Add(time.Minute), cocoDet("star", 10, 10, 20, 20, 0.3)),
		failed,
		cocoRow("jb", "m.jsonl:2", t0, cocoDet("blue square", 0, 0, 10, 10, 0.9), cocoDet("green triangle", 1, 1, 2, 2, 0.4)),
		cocoRow("ja", "m.jsonl:1", t0, cocoDet("red circle", 60.800000000000004, 0.1+0.2, 100.123, 50.5, 0.123456789)),
		cocoRow("old", "m.jsonl:1", t0.Add(time.Hour), cocoDet("red circle", 0, 0, 1, 1, 1)), // an earlier run's query
	}
	dir := writeRows(t, rows...)
	if _, err := writeCOCO(dir, set); err != nil {
		t.Fatal(err)
	}
	f, res, raw := readCOCO(t, dir)

	wantCats := []COCOCategory{{1, "red circle", ""}, {2, "blue square", ""}, {3, "star", ""}, {4, "yellow star", ""}, {5, "the big one", ""}}
	if !reflect.DeepEqual(f.Categories, wantCats) {
		t.Errorf("categories %+v, want %+v", f.Categories, wantCats)
	}
	wantImages := []COCOImage{
		{ID: 1, FileName: "cam1/a.png", Width: 200, Height: 100, Source: "m.jsonl:1", JobIDs: []string{"ja", "ja2"}},
		{ID: 2, FileName: "cam1/b.png", Width: 200, Height: 100, Source: "m.jsonl:2", JobIDs: []string{"jb"}},
		// c.png failed: id 3 stays unused.
		{ID: 4, FileName: "cam2/d.png", Width: 200, Height: 100, Source: "m.jsonl:5", JobIDs: []string{"jd"}},
	}
	if !reflect.DeepEqual(f.Images, wantImages) {
		t.Errorf("images\n%+v\nwant\n%+v", f.Images, wantImages)
	}
	wantAnns := []COCOAnnotation{
		{ID: 1, ImageID: 1, CategoryID: 1, BBox: [4]float64{60.8, 0.3, 39.32, 50.2}, Area: 1973.86, Score: 0.1235, JobID: "ja"},
		{ID: 2, ImageID: 1, CategoryID: 3, BBox: [4]float64{10, 10, 10, 10}, Area: 100, Score: 0.3, JobID: "ja2"},
		{ID: 3, ImageID: 2, CategoryID: 2, BBox: [4]float64{0, 0, 10, 10}, Area: 100, Score: 0.9, JobID: "jb"},
		{ID: 4, ImageID: 4, CategoryID: 5, BBox: [4]float64{1, 2, 2, 2}, Area: 4, Score: 0.5, JobID: "jd"},
	}
	if !reflect.DeepEqual(f.Annotations, wantAnns) {
		t.Errorf("annotations\n%+v\nwant\n%+v", f.Annotations, wantAnns)
	}
	if !bytes.Contains(raw, []byte("60.8,")) || bytes.Contains(raw, []byte("60.800000000000004")) {
		t.Fatalf("numbers are not rounded in the file: %s", raw)
	}
	if len(res) != len(wantAnns) {
		t.Fatalf("%d results, want %d", len(res), len(wantAnns))
	}
	for i, a := range wantAnns {
		if want := (COCOResult{a.ImageID, a.CategoryID, a.BBox, a.Score}); res[i] != want {
			t.Errorf("result %d = %+v, want %+v", i, res[i], want)
		}
	}
	wantInfo := COCOInfo{Description: "LocateAnything detections, exported by submit --coco", Version: "1.0", Year: 2026,
		Contributor: "tiny-shapes", DateCreated: "2026-12-02T10:01:00Z"}
	if f.Info != wantInfo || f.Licenses == nil {
		t.Errorf("info %+v, licenses %v; want %+v and a list", f.Info, f.Licenses, wantInfo)
	}
	for _, key := range []string{`"info":`, `"licenses": []`, `"iscrowd": 0`} {
		if !bytes.Contains(raw, []byte(key)) {
			t.Errorf("the dataset lacks %s", key)
		}
	}

	// The same rows in another order, written again: the same bytes.
	rows[0], rows[4] = rows[4], rows[0]
	dir2 := writeRows(t, rows...)
	if _, err := writeCOCO(dir2, set); err != nil {
		t.Fatal(err)
	}
	if _, _, again := readCOCO(t, dir2); !bytes.Equal(again, raw) {
		t.Errorf("the export depends on the order results came in:\n%s\n%s", raw, again)
	}
}

// TestCOCOFileNamesNeverCollide: two images at the same path below two inputs keep their
// inputs' paths as file names; a manifest's, the image they name.
func TestCOCOFileNamesNeverCollide(t *testing.T) {
	got := fileNames([]Item{
		{Image: "/a/x.png", Rel: "x.png", Origin: "a/x.png"},
		{Image: "/b/x.png", Rel: "x.png", Origin: "b/x.png"},
		{Image: "/m/y.png", Rel: "y.png", Origin: "list.csv:2"},
		{Image: "s3://bucket/n/y.png", Rel: "y.png", Origin: "list.csv:3"},
		{Image: "/c/z.png", Rel: "z.png", Origin: "c"},
	})
	want := []string{"a/x.png", "b/x.png", "/m/y.png", "s3://bucket/n/y.png", "z.png"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("file names %q, want %q", got, want)
	}
}

// TestCOCOLeavesInventedLabelsOut: a box whose label the query did not ask for is no
// category and stays out, with a warning; the categories stay the query's.
func TestCOCOLeavesInventedLabelsOut(t *testing.T) {
	dir := writeRows(t, cocoRow("j", "x.png", time.Now(), cocoDet("triangle", 0, 0, 1, 1, 0.2), cocoDet("green triangle", 0, 0, 1, 1, 0.2)))
	set := cocoSet{Items: []Item{{Image: "/x.png", Rel: "x.png", Origin: "x.png"}}, Defaults: JobDefaults{Query: "triangle</c>"}, Jobs: map[string]bool{"j": true}}
	warnings, err := writeCOCO(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	f, _, _ := readCOCO(t, dir)
	if len(f.Categories) != 1 || f.Categories[0].Name != "triangle" || len(f.Annotations) != 1 {
		t.Errorf("categories %+v, %d annotations; want triangle alone with its box", f.Categories, len(f.Annotations))
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "1 boxes whose label") {
		t.Errorf("warnings %q, want one counting the box left out", warnings)
	}
}

// TestCOCOWithoutBoxesWritesNoResultsList: an export with no box writes the dataset (its
// images and categories) but no results list, since pycocotools' loadRes fails on an
// empty one; it says so, and removes the list of an earlier run that had boxes.
func TestCOCOWithoutBoxesWritesNoResultsList(t *testing.T) {
	items := []Item{{Image: "/x.png", Rel: "x.png", Origin: "x.png"}}
	set := cocoSet{Items: items, Defaults: JobDefaults{Query: "triangle"}, Jobs: map[string]bool{"j": true}}
	dir := writeRows(t, cocoRow("j", "x.png", time.Now(), cocoDet("triangle", 0, 0, 1, 1, 0.2)))
	if _, err := writeCOCO(dir, set); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, COCOResultsFile)); err != nil {
		t.Fatalf("a run with a box: %v", err)
	}
	// The same directory, rerun with another query that finds nothing.
	data, err := os.ReadFile(filepath.Join(writeRows(t, cocoRow("k", "x.png", time.Now())), ResultsFile))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, ResultsFile), data, 0o644))
	set.Jobs = map[string]bool{"k": true}
	warnings, err := writeCOCO(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || warnings[0] != ErrNoBoxes.Error() || !strings.Contains(warnings[0], COCOResultsFile+" is not written") {
		t.Errorf("warnings %q, want the one that says why no results list", warnings)
	}
	if _, err := os.Stat(filepath.Join(dir, COCOResultsFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after a run without boxes: %v; want no file (an empty list breaks loadRes)", COCOResultsFile, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, COCOFile))
	must(t, err)
	var f COCODataset
	must(t, json.Unmarshal(raw, &f))
	if len(f.Images) != 1 || len(f.Categories) != 1 || len(f.Annotations) != 0 {
		t.Errorf("dataset: %d images, %d categories, %d annotations; want the image and category, no annotation", len(f.Images), len(f.Categories), len(f.Annotations))
	}
}
