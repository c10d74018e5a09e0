package submit

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/locateanything/detect/engine"
)

// manifestLine is one JSONL manifest line. Fields beyond these are an error, so a typo
// ("querry") is reported instead of silently ignored.
type manifestLine struct {
	Image    string          `json:"image"`
	Query    string          `json:"query"`
	Task     engine.Task     `json:"task"`
	Metadata json.RawMessage `json:"metadata"`
}

// ReadManifest reads a manifest file: JSONL (.jsonl), one object per line
//
//	{"image": "frames/0001.jpg", "query": "person</c>car", "task": "detect", "metadata": {"cam": 4}}
//
// or CSV (.csv) with a header row naming the columns image (required), query, task and
// metadata (a JSON object). Only image is required; blank lines are skipped. A relative
// image path is relative to the manifest's directory. Every error names the file and line.
func ReadManifest(path string) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	defer f.Close()
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	var items []Item
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl":
		items, err = readJSONLManifest(f, path, base)
	case ".csv":
		items, err = readCSVManifest(f, path, base)
	default:
		return nil, fmt.Errorf("manifest %s: unknown format (want .jsonl or .csv)", path)
	}
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("manifest %s: no lines", path)
	}
	return items, nil
}

func readJSONLManifest(r io.Reader, name, base string) ([]Item, error) {
	var items []Item
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		origin := fmt.Sprintf("%s:%d", name, n)
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		var m manifestLine
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: not a JSON object of the manifest schema (image, query, task, metadata): %w", origin, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("%s: more than one JSON value on the line", origin)
		}
		it, err := manifestItem(m, origin, base)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", name, err)
	}
	return items, nil
}

var csvColumns = map[string]bool{"image": true, "query": true, "task": true, "metadata": true}

func readCSVManifest(r io.Reader, name, base string) ([]Item, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 0 // every row as wide as the header
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("manifest %s: empty, want a header row (image,query,task,metadata)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s:1: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		if !csvColumns[h] {
			return nil, fmt.Errorf("%s:1: unknown column %q (want image, query, task, metadata)", name, h)
		}
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("%s:1: column %q appears twice", name, h)
		}
		col[h] = i
	}
	if _, ok := col["image"]; !ok {
		return nil, fmt.Errorf("%s:1: the header has no image column", name)
	}
	field := func(rec []string, c string) string {
		if i, ok := col[c]; ok {
			return rec[i]
		}
		return ""
	}
	var items []Item
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("%s:%d: %w", name, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("manifest %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		origin := fmt.Sprintf("%s:%d", name, line)
		m := manifestLine{
			Image: field(rec, "image"),
			Query: field(rec, "query"),
			Task:  engine.Task(field(rec, "task")),
		}
		if md := strings.TrimSpace(field(rec, "metadata")); md != "" {
			m.Metadata = json.RawMessage(md)
		}
		it, err := manifestItem(m, origin, base)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

// manifestItem checks one manifest line and resolves its image reference.
func manifestItem(m manifestLine, origin, base string) (Item, error) {
	img := strings.TrimSpace(m.Image)
	if img == "" {
		return Item{}, fmt.Errorf("%s: image: required", origin)
	}
	if m.Task != "" && !m.Task.Valid() {
		return Item{}, fmt.Errorf("%s: task: %q is not one of %v", origin, m.Task, engine.Tasks)
	}
	if len(m.Metadata) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(m.Metadata, &obj); err != nil || obj == nil {
			return Item{}, fmt.Errorf("%s: metadata: must be a JSON object", origin)
		}
	}
	if !IsURL(img) {
		if !filepath.IsAbs(img) {
			img = filepath.Join(base, img)
		}
		info, err := os.Stat(img)
		if err != nil {
			return Item{}, fmt.Errorf("%s: image: %w", origin, err)
		}
		if info.IsDir() {
			return Item{}, fmt.Errorf("%s: image: %s is a directory, want one image per line", origin, img)
		}
	}
	return Item{Image: img, Query: m.Query, Task: m.Task, Metadata: m.Metadata, Origin: origin, Rel: relUnder(base, img)}, nil
}
