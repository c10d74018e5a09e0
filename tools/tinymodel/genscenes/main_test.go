package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/submit"
)

// TestMakeWritesAManifestSubmitReads: the scenes exist as PNGs and submit accepts the
// manifest, with the true boxes in each line's metadata.
func TestMakeWritesAManifestSubmitReads(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run([]string{"make", "-n", "5", "-seed", "9", "-out", dir}, &out); err != nil {
		t.Fatal(err)
	}
	items, err := submit.ReadManifest(filepath.Join(dir, "manifest.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 5 {
		t.Fatalf("%d manifest items, want 5", len(items))
	}
	for _, it := range items {
		if _, err := os.Stat(it.Image); err != nil {
			t.Fatalf("manifest names %s: %v", it.Image, err)
		}
		var m truth
		if err := json.Unmarshal(it.Metadata, &m); err != nil || m.Boxes == nil || m.Scene == "" {
			t.Fatalf("metadata %s: want the scene and its true boxes (%v)", it.Metadata, err)
		}
		if it.Query == "" || it.Task == "" {
			t.Fatalf("item %+v has no query or task", it)
		}
	}
	again := t.TempDir()
	if err := run([]string{"make", "-n", "5", "-seed", "9", "-out", again}, &out); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "scene-03.png"))
	b, _ := os.ReadFile(filepath.Join(again, "scene-03.png"))
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed drew a different scene")
	}
}

// TestScoreCountsFoundMissedAndFailed scores a hand-made results file: one box found, one
// point in its box, a None for an absent thing, a wrong box and a failed job.
func TestScoreCountsFoundMissedAndFailed(t *testing.T) {
	rows := []string{
		`{"image":"a.png","task":"detect","query":"red circle","status":"succeeded","raw_text":"x","metadata":{"scene":"1/0","truth":[[10,10,50,50]]},"detections":[{"box":[11,9,50,52]}]}`,
		`{"image":"b.png","task":"point","query":"star","status":"succeeded","metadata":{"scene":"1/1","truth":[[0,0,20,20]]},"points":[{"point":[10,10]}]}`,
		`{"image":"c.png","task":"detect","query":"blue star","status":"succeeded","metadata":{"scene":"1/2","truth":[]},"detections":[]}`,
		`{"image":"d.png","task":"ground_one","query":"the largest square","status":"succeeded","metadata":{"scene":"1/3","truth":[[0,0,10,10]]},"detections":[{"box":[40,40,60,60]}]}`,
		`{"image":"e.png","task":"detect","query":"square","status":"failed","error":{"reason":"image_decode"},"metadata":{"scene":"1/4","truth":[]}}`,
	}
	path := filepath.Join(t.TempDir(), "results.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"score", path}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"found 1 of 1", "absent: answered None", "found 0 of 1, 1 extra", "failed: image_decode",
		"5 results (1 failed): 2 of 3 objects found (67 %)", "1 of 1 absent things answered None",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("score output lacks %q:\n%s", want, text)
		}
	}
}

func TestScoreRejectsResultsWithoutTruth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	if err := os.WriteFile(path, []byte(`{"image":"a.png","status":"succeeded"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"score", path}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "genscenes make") {
		t.Fatalf("score of foreign results: %v, want an error naming genscenes make", err)
	}
	if err := run(nil, &bytes.Buffer{}); err == nil {
		t.Fatal("no arguments: want the usage error")
	}
}

// TestHeldoutManifestIsCurrent: testdata/heldout.jsonl, which the README's quick start
// submits, is what `genscenes heldout` makes of heldout.json (each scene's own query and
// task, true boxes in pixels), and submit reads it with every image there.
func TestHeldoutManifestIsCurrent(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"heldout", "../testdata/heldout.json"}, &out); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../testdata/heldout.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), committed) {
		t.Fatal("testdata/heldout.jsonl is stale: go run ./tools/tinymodel/genscenes heldout tools/tinymodel/testdata/heldout.json > tools/tinymodel/testdata/heldout.jsonl")
	}
	items, err := submit.ReadManifest("../testdata/heldout.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	queries := map[string]bool{}
	for _, it := range items {
		if _, err := os.Stat(it.Image); err != nil {
			t.Errorf("manifest names %s: %v", it.Image, err)
		}
		var m truth
		if err := json.Unmarshal(it.Metadata, &m); err != nil || m.Boxes == nil {
			t.Errorf("%s: metadata %s, want the true boxes", it.Image, it.Metadata)
		}
		for _, b := range m.Boxes {
			if b[0] < 0 || b[1] < 0 || b[2] > 1000 || b[3] > 1000 || b[2] <= b[0] || b[3] <= b[1] {
				t.Errorf("%s: true box %v is not a box in pixels", it.Image, b)
			}
		}
		queries[it.Query] = true
	}
	if len(items) != 96 || len(queries) < 20 {
		t.Errorf("%d scenes with %d distinct queries; want the 96 held-out scenes, each with its own", len(items), len(queries))
	}
}

func TestHeldoutRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty.json":   `{"scenes": []}`,
		"notjson.json": `{`,
		"noquery.json": `{"scenes": [{"file": "a.png", "task": "detect", "width": 10, "height": 10}]}`,
		"nowidth.json": `{"scenes": [{"file": "a.png", "task": "detect", "query": "q", "height": 10}]}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := run([]string{"heldout", p}, &out); err == nil {
			t.Errorf("%s: no error (wrote %q)", name, out.String())
		}
	}
}
