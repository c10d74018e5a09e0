package submit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
)

func writeManifest(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadManifestJSONL(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "frames/a.jpg", "frames/b.jpg")
	p := writeManifest(t, dir, "list.jsonl", `{"image": "frames/a.jpg", "query": "dog", "task": "ground", "metadata": {"cam": 4}}

{"image": "`+filepath.Join(dir, "frames/b.jpg")+`"}
{"image": "s3://bucket/c.jpg", "query": "cat"}
`)
	items, err := Expand(context.Background(), []string{p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 {
		t.Fatalf("%d items, want 3", len(items))
	}
	a := items[0]
	if a.Image != filepath.Join(dir, "frames/a.jpg") || a.Query != "dog" || a.Task != engine.TaskGround || string(a.Metadata) != `{"cam": 4}` {
		t.Errorf("line 1 = %+v", a)
	}
	if a.Origin != p+":1" {
		t.Errorf("origin %q, want %q", a.Origin, p+":1")
	}
	if items[1].Origin != p+":3" {
		t.Errorf("origin after a blank line %q, want line 3", items[1].Origin)
	}
	if items[2].Local() || items[2].Image != "s3://bucket/c.jpg" {
		t.Errorf("line 4 = %+v, want the s3 URL as is", items[2])
	}
}

func TestReadManifestCSV(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "a.jpg", "b.jpg")
	p := writeManifest(t, dir, "list.csv", "image,query,metadata\na.jpg,person</c>car,\"{\"\"cam\"\":1}\"\nb.jpg,,\n")
	items, err := ReadManifest(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Query != "person</c>car" || string(items[0].Metadata) != `{"cam":1}` || items[1].Query != "" {
		t.Fatalf("items = %+v", items)
	}
	if items[1].Origin != p+":3" {
		t.Errorf("origin %q, want line 3", items[1].Origin)
	}
}

// Every manifest error names the file and the line, and says what is wrong.
func TestReadManifestErrorsNameTheLine(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, "a.jpg")
	cases := []struct {
		name, body, want string
	}{
		{"bad.jsonl", "{\"image\": \"a.jpg\"}\n{\"image\": \"a.jpg\", \"querry\": \"dog\"}\n", ":2: "},
		{"bad.jsonl", "{\"image\": \"a.jpg\"}\n\n{not json\n", ":3: "},
		{"bad.jsonl", "{\"query\": \"dog\"}\n", ":1: image: required"},
		{"bad.jsonl", "{\"image\": \"a.jpg\", \"task\": \"segment\"}\n", ":1: task: \"segment\""},
		{"bad.jsonl", "{\"image\": \"a.jpg\", \"metadata\": [1]}\n", ":1: metadata: must be a JSON object"},
		{"bad.jsonl", "{\"image\": \"a.jpg\"}\n{\"image\": \"missing.jpg\"}\n", ":2: image: "},
		{"bad.jsonl", "{\"image\": \"a.jpg\"} {\"image\": \"a.jpg\"}\n", ":1: more than one JSON value"},
		{"bad.csv", "image,query\na.jpg,dog\na.jpg,dog,extra\n", ":3: "},
		{"bad.csv", "image,colour\na.jpg,red\n", ":1: unknown column \"colour\""},
		{"bad.csv", "query\ndog\n", ":1: the header has no image column"},
		{"bad.csv", "image,metadata\na.jpg,{}\na.jpg,nope\n", ":3: metadata: must be a JSON object"},
		{"bad.csv", "", "empty"},
	}
	for _, c := range cases {
		p := writeManifest(t, dir, c.name, c.body)
		_, err := ReadManifest(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("manifest %q: err = %v, want it to contain %q", c.body, err, c.want)
		}
		if err != nil && c.want != "empty" && !strings.Contains(err.Error(), p) {
			t.Errorf("manifest %q: err = %v, want it to name %s", c.body, err, p)
		}
	}
}
