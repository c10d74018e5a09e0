package submit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/locateanything/detect/jobs"
)

// The output directory mirrors the inputs: the result of frames/cam04/000123.jpg, submitted
// as `submit frames/`, is in OUT/results/cam04/000123.json and its overlay in
// OUT/overlays/cam04/000123.png. Each row of results.jsonl records those paths (json_file,
// overlay_file) beside the job id, and the per-image JSON is that row.

// ResultsDir holds one JSON file per image, below the same relative path as the image.
const ResultsDir = "results"

// relUnder is p's path below root, slash-separated and clean: a path or URL below root
// loses root. Anything else keeps what can be kept safely (a URL loses its scheme, an
// absolute path its leading slash), and ".." elements are dropped: the result always
// stays inside the output directory.
func relUnder(root, p string) string {
	rel := p
	switch {
	case IsURL(p):
		if r, ok := strings.CutPrefix(p, root); ok && root != "" {
			rel = r
		} else {
			_, rel, _ = strings.Cut(p, "://")
		}
	default:
		rel = filepath.Clean(p)
		if r, err := filepath.Rel(root, rel); err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			rel = r
		}
	}
	var parts []string
	for _, e := range strings.Split(filepath.ToSlash(rel), "/") {
		if e != "" && e != "." && e != ".." {
			parts = append(parts, e)
		}
	}
	if len(parts) == 0 {
		return "image"
	}
	return strings.Join(parts, "/")
}

// assignStems decides where each item's files go: its Rel without the extension. Items
// that would share a stem while being different work (x.jpg beside x.png, a/x.jpg and
// b/x.jpg from two inputs, one image under two queries) are marked shared: their job ids
// tell them apart (localName). The same image listed twice with the same settings is one
// job and shares nothing.
func assignStems(items []Item, d JobDefaults) {
	type work struct {
		image, query string
		task         string
	}
	byStem := map[string]map[work]bool{}
	for i := range items {
		it := &items[i]
		rel := it.Rel
		if rel == "" {
			rel = relUnder("", it.Image)
		}
		it.stem = strings.TrimSuffix(rel, path.Ext(rel))
		w := work{image: it.Image, query: it.Query, task: string(it.Task)}
		if w.query == "" {
			w.query = d.Query
		}
		if w.task == "" {
			w.task = string(d.Task)
		}
		if byStem[it.stem] == nil {
			byStem[it.stem] = map[work]bool{}
		}
		byStem[it.stem][w] = true
	}
	for i := range items {
		items[i].shared = len(byStem[items[i].stem]) > 1
	}
}

// localName is where a job's files go below results/ and overlays/, without extension.
func localName(stem string, shared bool, id string) string {
	if !shared {
		return stem
	}
	return stem + "." + id[:min(len(id), 12)]
}

// localFiles fills a row's json_file and overlay_file from the job's local name: the
// overlay only when the job asked for one (its extension follows the result's format).
func localFiles(row *Row, name string) {
	if name == "" {
		return
	}
	row.JSONFile = path.Join(ResultsDir, name+".json")
	if row.OverlayURL != nil && *row.OverlayURL != "" {
		row.OverlayFile = path.Join(OverlaysDir, name+overlayFormatOf(row.Result).Ext())
	}
}

// overlayPath is where a row's overlay is downloaded: its overlay_file, or, for a row an
// older submit wrote, overlays/<id>.<ext>.
func overlayPath(dir string, row Row) string {
	if row.OverlayFile != "" {
		return filepath.Join(dir, filepath.FromSlash(row.OverlayFile))
	}
	return filepath.Join(dir, OverlaysDir, row.ID+overlayFormatOf(row.Result).Ext())
}

// writeImageJSON writes the row as its image's JSON file (json_file), through a temporary
// file so that a crash never leaves half a file under the final name. Rows without a
// json_file (written by an older submit) have none.
func writeImageJSON(dir string, row Row) error {
	if row.JSONFile == "" {
		return nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // raw_text and queries hold <ref> and </c>: keep them greppable
	if err := enc.Encode(row); err != nil {
		return fmt.Errorf("encode the result of job %s: %w", row.ID, err)
	}
	p := filepath.Join(dir, filepath.FromSlash(row.JSONFile))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("result file of job %s: %w", row.ID, err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("result file of job %s: %w", row.ID, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("result file of job %s: %w", row.ID, err)
	}
	return nil
}

// ensureImageJSON writes a row's JSON file when it is missing (a crash between the row and
// its file, or a file deleted since).
func ensureImageJSON(dir string, row Row) error {
	if row.JSONFile == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(row.JSONFile))); err == nil {
		return nil
	}
	return writeImageJSON(dir, row)
}

// validRow reports whether a row's recorded local paths stay inside the output directory
// (a results.jsonl edited by hand must not make submit write elsewhere).
func validRow(r Row) bool {
	for _, p := range []string{r.JSONFile, r.OverlayFile} {
		if p != "" && (path.IsAbs(p) || !filepath.IsLocal(filepath.FromSlash(p))) {
			return false
		}
	}
	return jobs.ValidToken(r.ID)
}
