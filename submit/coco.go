package submit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// COCO detections export: the image, category and annotation lists of the COCO format,
// built from every succeeded row of results.jsonl. Boxes are [x, y, width, height] in
// original-image pixels; the model gives no confidence, so there is no score.
type cocoFile struct {
	Images      []cocoImage      `json:"images"`
	Categories  []cocoCategory   `json:"categories"`
	Annotations []cocoAnnotation `json:"annotations"`
}

type cocoImage struct {
	ID       int    `json:"id"`
	FileName string `json:"file_name"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	JobID    string `json:"job_id"`
}

type cocoCategory struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

type cocoAnnotation struct {
	ID         int        `json:"id"`
	ImageID    int        `json:"image_id"`
	CategoryID int        `json:"category_id"`
	BBox       [4]float64 `json:"bbox"`
	Area       float64    `json:"area"`
	IsCrowd    int        `json:"iscrowd"`
}

// writeCOCO writes detections.coco.json in dir from the rows in its results.jsonl. Image
// and category ids are assigned in row order and first-seen label order, from 1.
func writeCOCO(dir string) error {
	rows, err := readRows(dir)
	if err != nil {
		return fmt.Errorf("COCO export: %w", err)
	}
	f := cocoFile{Images: []cocoImage{}, Categories: []cocoCategory{}, Annotations: []cocoAnnotation{}}
	catID := map[string]int{}
	for _, r := range rows {
		if r.Status != "succeeded" {
			continue
		}
		img := cocoImage{ID: len(f.Images) + 1, FileName: r.Source, Width: r.Width, Height: r.Height, JobID: r.ID}
		f.Images = append(f.Images, img)
		for _, d := range r.Detections {
			c, ok := catID[d.Label]
			if !ok {
				c = len(f.Categories) + 1
				catID[d.Label] = c
				f.Categories = append(f.Categories, cocoCategory{ID: c, Name: d.Label})
			}
			w, h := d.Box[2]-d.Box[0], d.Box[3]-d.Box[1]
			f.Annotations = append(f.Annotations, cocoAnnotation{
				ID: len(f.Annotations) + 1, ImageID: img.ID, CategoryID: c,
				BBox: [4]float64{d.Box[0], d.Box[1], w, h}, Area: w * h,
			})
		}
	}
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return fmt.Errorf("COCO export: %w", err)
	}
	tmp := filepath.Join(dir, COCOFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("COCO export: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, COCOFile)); err != nil {
		return fmt.Errorf("COCO export: %w", err)
	}
	return nil
}
