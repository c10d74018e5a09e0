package submit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/prompt"
	"github.com/locateanything/detect/jobs"
)

// The COCO export (--coco, docs/submit.md "COCO export"): detections.coco.json, a COCO
// detection dataset of the run's images and boxes, and detections.results.json, the same
// boxes in the results format evaluation tools rank by score. Both are made so that tools
// take them as they are and reruns give the same files:
//
//   - categories are the query's </c> list, and for a manifest the union over its lines in
//     order of first appearance, so their ids do not depend on what was detected;
//   - image ids are the order of the images in the inputs (1 for the first), not the order
//     results came in; an image that failed keeps its id unused;
//   - file_name is the image's path below its input (results mirror it), not the input
//     string; two different images under one such path are told apart by their source;
//   - bbox and area are rounded to 2 decimals, score (from the tokens' probabilities,
//     docs/scores.md) to 4: two decimals would tie boxes that the ranking must tell apart;
//   - info says what made the file; date_created is the newest result's finish time, so it
//     changes only when the results do.
//
// Only the run's set goes in (the jobs of its inputs and settings: rerunning into the same
// directory with another query exports that query's answers alone), and only boxes: points
// have no COCO detection form. A box whose label is none of the categories (a label the
// model made up, which the query's warnings usually foretell) is left out and counted in a
// warning.

// COCOResultsFile is the export's results list, beside COCOFile (the dataset).
const COCOResultsFile = "detections.results.json"

// COCODataset is the export's dataset file (COCOFile), in the layout pycocotools' COCO reads.
type COCODataset struct {
	Info        COCOInfo         `json:"info"`
	Licenses    []COCOLicense    `json:"licenses"`
	Images      []COCOImage      `json:"images"`
	Categories  []COCOCategory   `json:"categories"`
	Annotations []COCOAnnotation `json:"annotations"`
}

// COCOInfo is the dataset's info block: what wrote it, and when.
type COCOInfo struct {
	Description string `json:"description"`
	Version     string `json:"version"`
	Year        int    `json:"year"`
	Contributor string `json:"contributor"`
	URL         string `json:"url"`
	DateCreated string `json:"date_created"`
}

// COCOLicense is the licenses block's entry; the export knows no image's license, so the
// block is empty.
type COCOLicense struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
	URL  string `json:"url"`
}

// COCOImage is one image of the dataset.
type COCOImage struct {
	ID       int      `json:"id"`
	FileName string   `json:"file_name"`
	Width    int      `json:"width"`
	Height   int      `json:"height"`
	Source   string   `json:"source"`  // the input it was listed as
	JobIDs   []string `json:"job_ids"` // its jobs (one per query it was asked)
}

// COCOCategory is one category: one of the queries' categories.
type COCOCategory struct {
	ID            int    `json:"id"`
	Name          string `json:"name"`
	Supercategory string `json:"supercategory"`
}

// COCOAnnotation is one box.
type COCOAnnotation struct {
	ID         int        `json:"id"`
	ImageID    int        `json:"image_id"`
	CategoryID int        `json:"category_id"`
	BBox       [4]float64 `json:"bbox"` // x, y, width, height in original pixels
	Area       float64    `json:"area"`
	IsCrowd    int        `json:"iscrowd"`
	Score      float64    `json:"score"`
	JobID      string     `json:"job_id"`
}

// COCOResult is one entry of the results file.
type COCOResult struct {
	ImageID    int        `json:"image_id"`
	CategoryID int        `json:"category_id"`
	BBox       [4]float64 `json:"bbox"`
	Score      float64    `json:"score"`
}

// cocoSet is what an export is made of: the run's inputs in order, the settings that fill
// in what an input leaves out, and the ids of the run's jobs.
type cocoSet struct {
	Items    []Item
	Defaults JobDefaults
	Jobs     map[string]bool
}

// exportCOCO writes the COCO files of the run's set from its results.jsonl; what the
// export had to leave out goes to the summary's warnings.
func (r *batchRun) exportCOCO() error {
	set := cocoSet{Items: r.items, Defaults: r.cfg.Defaults, Jobs: map[string]bool{}}
	for id := range r.expected {
		set.Jobs[id] = true
	}
	warnings, err := writeCOCO(r.cfg.OutDir, set)
	for _, w := range warnings {
		r.warn(w, 0)
	}
	return err
}

// writeCOCO writes detections.coco.json and detections.results.json in dir for set, from
// the rows of dir's results.jsonl, and returns the warnings of the export: boxes left out,
// and ErrNoBoxes's text when there is no box at all. A results list of an earlier run
// is removed then, so that the directory never pairs this dataset with other answers.
func writeCOCO(dir string, set cocoSet) (warnings []string, err error) {
	rows, err := ReadRows(dir)
	if err != nil {
		return nil, fmt.Errorf("COCO export: %w", err)
	}
	f, dropped := buildCOCO(set, rows)
	if dropped > 0 {
		warnings = append(warnings, fmt.Sprintf("COCO export: %d boxes whose label is not one of the query's categories were left out (results.jsonl keeps them)", dropped))
	}
	if err := writeJSONFile(filepath.Join(dir, COCOFile), f); err != nil {
		return warnings, fmt.Errorf("COCO export: %w", err)
	}
	resultsPath := filepath.Join(dir, COCOResultsFile)
	if len(f.Annotations) == 0 {
		if err := os.Remove(resultsPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return warnings, fmt.Errorf("COCO export: removing the earlier %s: %w", COCOResultsFile, err)
		}
		return append(warnings, ErrNoBoxes.Error()), nil
	}
	results := make([]COCOResult, len(f.Annotations))
	for i, a := range f.Annotations {
		results[i] = COCOResult{ImageID: a.ImageID, CategoryID: a.CategoryID, BBox: a.BBox, Score: a.Score}
	}
	if err := writeJSONFile(resultsPath, results); err != nil {
		return warnings, fmt.Errorf("COCO export: %w", err)
	}
	return warnings, nil
}

// buildCOCO makes the dataset from the set's succeeded rows, and counts the boxes left out
// for a label that is not a category.
func buildCOCO(set cocoSet, rows []Row) (COCODataset, int) {
	f := COCODataset{Licenses: []COCOLicense{}, Images: []COCOImage{}, Categories: []COCOCategory{}, Annotations: []COCOAnnotation{}}

	// Categories: every input's query, in input order.
	catID := map[string]int{}
	for _, it := range set.Items {
		for _, name := range categoriesOf(effectiveTask(it, set.Defaults), effectiveQuery(it, set.Defaults)) {
			if _, ok := catID[name]; !ok {
				catID[name] = len(f.Categories) + 1
				f.Categories = append(f.Categories, COCOCategory{ID: catID[name], Name: name, Supercategory: ""})
			}
		}
	}

	// Images: one per distinct image of the inputs, numbered in input order, with the
	// succeeded results of the set's jobs made from its inputs, also in input order.
	rowOf := map[string]Row{} // by source
	for _, row := range rows {
		if set.Jobs[row.ID] && row.Status == jobs.StatusSucceeded {
			rowOf[row.Source] = row
		}
	}
	type image struct {
		item Item
		rows []Row
	}
	var images []*image
	byPath := map[string]*image{} // by Item.Image
	for _, it := range set.Items {
		im, ok := byPath[it.Image]
		if !ok {
			im = &image{item: it}
			byPath[it.Image] = im
			images = append(images, im)
		}
		if row, ok := rowOf[it.Origin]; ok && !slices.ContainsFunc(im.rows, func(r Row) bool { return r.ID == row.ID }) {
			im.rows = append(im.rows, row)
		}
	}
	items := make([]Item, len(images))
	for i, im := range images {
		items[i] = im.item
	}
	names := fileNames(items)

	var newest time.Time
	models := []string{}
	dropped := 0
	for i, im := range images {
		if len(im.rows) == 0 {
			continue // failed or not run: no size to give; the id stays unused
		}
		first := im.rows[0]
		img := COCOImage{ID: i + 1, FileName: names[i], Width: first.Width, Height: first.Height, Source: im.item.Origin, JobIDs: []string{}}
		for _, row := range im.rows {
			img.JobIDs = append(img.JobIDs, row.ID)
			if row.FinishedAt.After(newest) {
				newest = row.FinishedAt
			}
			if row.Model != "" && !slices.Contains(models, row.Model) {
				models = append(models, row.Model)
			}
			for _, d := range row.Detections {
				c, ok := catID[strings.TrimSpace(d.Label)]
				if !ok {
					dropped++
					continue
				}
				x, y := round2(d.Box[0]), round2(d.Box[1])
				w, h := round2(d.Box[2]-d.Box[0]), round2(d.Box[3]-d.Box[1])
				f.Annotations = append(f.Annotations, COCOAnnotation{
					ID: len(f.Annotations) + 1, ImageID: img.ID, CategoryID: c,
					BBox: [4]float64{x, y, w, h}, Area: round2(w * h), Score: round4(d.Score), JobID: row.ID,
				})
			}
		}
		f.Images = append(f.Images, img)
	}

	f.Info = COCOInfo{
		Description: "LocateAnything detections, exported by submit --coco",
		Version:     "1.0",
		Contributor: strings.Join(models, ", "),
	}
	if !newest.IsZero() {
		f.Info.Year, f.Info.DateCreated = newest.UTC().Year(), newest.UTC().Format(time.RFC3339)
	}
	return f, dropped
}

// categoriesOf is the categories a query asks for: the detect task's </c> list, or the
// phrase of the other tasks (the label the model answers with), trimmed, empty ones left
// out.
func categoriesOf(task engine.Task, query string) []string {
	parts := []string{query}
	if task == engine.TaskDetect {
		parts = strings.Split(query, prompt.CategorySep)
	}
	var out []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func effectiveQuery(it Item, d JobDefaults) string {
	if it.Query != "" {
		return it.Query
	}
	return d.Query
}

func effectiveTask(it Item, d JobDefaults) engine.Task {
	switch {
	case it.Task != "":
		return it.Task
	case d.Task != "":
		return d.Task
	}
	return engine.TaskDetect
}

// fileNames gives each image its path below its input; images that share one keep their
// input as it was given instead (a path, a URL, or for a manifest the image it names), so
// that no two images of an export have the same file_name.
func fileNames(items []Item) []string {
	names := make([]string, len(items))
	count := map[string]int{}
	for i, it := range items {
		names[i] = it.Rel
		if names[i] == "" {
			names[i] = relUnder("", it.Image)
		}
		count[names[i]]++
	}
	for i, it := range items {
		if count[names[i]] > 1 {
			if isManifestOrigin(it.Origin) {
				names[i] = it.Image
			} else {
				names[i] = filepath.ToSlash(it.Origin)
			}
		}
	}
	return names
}

// isManifestOrigin reports whether an item's origin is a manifest line ("list.csv:12").
func isManifestOrigin(origin string) bool {
	i := strings.LastIndexByte(origin, ':')
	return i > 0 && isManifest(origin[:i])
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// writeJSONFile writes v to path through a temporary file, indented and without HTML
// escaping (labels keep their < and >).
func writeJSONFile(path string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
