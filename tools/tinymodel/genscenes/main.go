// Command genscenes makes fresh tiny-shapes scenes for the bundled model and scores what the
// service answered about them. make demo uses it:
//
//	genscenes make -n 12 -seed 7 -out DIR   # DIR/scene-00.png ..., DIR/manifest.jsonl for submit
//	genscenes score DIR/results.jsonl       # per scene: what was asked, found, missed
//	genscenes heldout HELDOUT.json          # the held-out scenes' manifest, on stdout
//
// The README's quick start submits testdata/heldout.jsonl, which `genscenes heldout
// testdata/heldout.json` writes: each held-out scene with its own query and task.
//
// Each manifest line carries the true boxes in its metadata, which the service echoes into
// every result, so score needs nothing but submit's results.jsonl.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "genscenes:", err)
		os.Exit(1)
	}
}

const usage = "usage: genscenes make [-n N] [-seed S] -out DIR | genscenes score RESULTS.jsonl | genscenes heldout HELDOUT.json"

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "make":
		fs := flag.NewFlagSet("make", flag.ContinueOnError)
		n := fs.Int("n", 12, "number of scenes")
		seed := fs.Uint64("seed", 0, "random seed (0: from the clock)")
		out := fs.String("out", "", "directory for the PNGs and manifest.jsonl (required)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" || *n < 1 {
			return errors.New("make: -out is required and -n must be at least 1")
		}
		if *seed == 0 {
			*seed = uint64(time.Now().UnixNano())
		}
		if err := makeScenes(*out, *n, *seed); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d scenes (seed %d) in %s\n", *n, *seed, *out)
		return nil
	case "score":
		if len(args) != 2 {
			return errors.New(usage)
		}
		return score(args[1], stdout)
	case "heldout":
		if len(args) != 2 {
			return errors.New(usage)
		}
		return heldoutManifest(args[1], stdout)
	}
	return errors.New(usage)
}

// truth is the metadata each manifest line carries.
type truth struct {
	Scene string       `json:"scene"` // seed/index: how to make it again
	Boxes [][4]float64 `json:"truth"` // pixels, x1 y1 x2 y2
}

type manifestLine struct {
	Image    string `json:"image"`
	Query    string `json:"query"`
	Task     string `json:"task"`
	Metadata truth  `json:"metadata"`
}

// makeScenes writes n scenes and their manifest. Every scene has its own generator, seeded
// from (seed, index), so one scene can be made again on its own.
func makeScenes(dir string, n int, seed uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "manifest.jsonl"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // keep "</c>" readable
	for i := range n {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		s := shapes.NewScene(r)
		q := shapes.NewQuery(r, s)
		name := fmt.Sprintf("scene-%02d.png", i)
		if err := writePNG(filepath.Join(dir, name), s); err != nil {
			return err
		}
		line := manifestLine{Image: name, Query: q.Text, Task: q.Task,
			Metadata: truth{Scene: fmt.Sprintf("%d/%d", seed, i), Boxes: q.Truth}}
		if line.Metadata.Boxes == nil {
			line.Metadata.Boxes = [][4]float64{}
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

func writePNG(path string, s shapes.Scene) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, s.Image); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// resultRow is what score reads of a results.jsonl line.
type resultRow struct {
	Image    string `json:"image"`
	Query    string `json:"query"`
	Task     string `json:"task"`
	Status   string `json:"status"`
	RawText  string `json:"raw_text"`
	Metadata *truth `json:"metadata"`
	Error    *struct {
		Reason string `json:"reason"`
	} `json:"error"`
	Detections []struct {
		Box [4]float64 `json:"box"`
	} `json:"detections"`
	Points []struct {
		Point [2]float64 `json:"point"`
	} `json:"points"`
}

// score prints one line per result (found out of asked, the raw answer) and the totals.
func score(path string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var all shapes.Tally
	failed := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		var row resultRow
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if row.Metadata == nil {
			return fmt.Errorf("%s:%d: no true boxes in the metadata: was this made by genscenes make?", path, n)
		}
		if row.Status != "succeeded" {
			failed++
			reason := row.Status
			if row.Error != nil {
				reason += ": " + row.Error.Reason
			}
			fmt.Fprintf(stdout, "%-14s %-10s %-28q %s\n", filepath.Base(row.Image), row.Task, row.Query, reason)
			continue
		}
		var one shapes.Tally
		if row.Task == "point" {
			pts := make([][2]float64, len(row.Points))
			for i, p := range row.Points {
				pts[i] = p.Point
			}
			one.AddPoints(row.Metadata.Boxes, pts)
			all.AddPoints(row.Metadata.Boxes, pts)
		} else {
			boxes := make([][4]float64, len(row.Detections))
			for i, d := range row.Detections {
				boxes[i] = d.Box
			}
			one.Add(row.Metadata.Boxes, boxes)
			all.Add(row.Metadata.Boxes, boxes)
		}
		verdict := fmt.Sprintf("found %d of %d", one.Found, one.Objects)
		if one.Objects == 0 {
			verdict = "absent: answered None"
			if one.NoneOK == 0 {
				verdict = "absent: answered a box"
			}
		}
		if one.FalsePos > 0 && one.Objects > 0 {
			verdict += fmt.Sprintf(", %d extra", one.FalsePos)
		}
		fmt.Fprintf(stdout, "%-14s %-10s %-28q %-24s %s\n", filepath.Base(row.Image), row.Task, row.Query, verdict,
			strings.TrimSuffix(row.RawText, "<|im_end|>"))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	found, meanIoU, fp, noneAcc := all.Figures()
	fmt.Fprintf(stdout, "\n%d results (%d failed): %d of %d objects found (%.0f %%), mean IoU %.2f, %.2f false positives per query, %d of %d absent things answered None (%.0f %%)\n",
		all.Queries+failed, failed, all.Found, all.Objects, 100*found, meanIoU, fp, all.NoneOK, all.Absent, 100*noneAcc)
	return nil
}

// heldoutScene is what heldoutManifest reads of a scene of heldout.json (written by
// export_goldens.py): the image relative to the file, the task and query, the picture's
// size and the true boxes in the model's 0..1000 units.
type heldoutScene struct {
	File   string       `json:"file"`
	Task   string       `json:"task"`
	Query  string       `json:"query"`
	Width  int          `json:"width"`
	Height int          `json:"height"`
	Truth  [][4]float64 `json:"truth"`
}

// heldoutManifest writes the manifest of the held-out scenes: one line per scene with its
// own query and task, the true boxes in pixels in the metadata (as make's), the image
// named relative to the manifest, which lies beside heldout.json.
func heldoutManifest(path string, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc struct {
		Scenes []json.RawMessage `json:"scenes"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Scenes) == 0 {
		return fmt.Errorf("%s: no scenes", path)
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for i, raw := range doc.Scenes {
		var s heldoutScene
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%s: scene %d: %w", path, i, err)
		}
		if s.File == "" || s.Query == "" || s.Task == "" || s.Width <= 0 || s.Height <= 0 {
			return fmt.Errorf("%s: scene %d: want file, task, query, width and height", path, i)
		}
		boxes := make([][4]float64, len(s.Truth))
		for j, t := range s.Truth {
			w, h := float64(s.Width)/1000, float64(s.Height)/1000
			boxes[j] = [4]float64{round2(t[0] * w), round2(t[1] * h), round2(t[2] * w), round2(t[3] * h)}
		}
		line := manifestLine{Image: s.File, Query: s.Query, Task: s.Task,
			Metadata: truth{Scene: strings.TrimSuffix(s.File, filepath.Ext(s.File)), Boxes: boxes}}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	return nil
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
