package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/submit"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// TestRunSaysItsProblems: what went wrong is in the summary, not only in JSON files. Real
// shape scenes and two corrupt files go through a real worker on the bundled model with a
// query that separates categories with ",": the summary names each failed image with its
// code and where the whole list is, and says the query's warning once for all the jobs
// that gave it. An empty --query is refused before anything exists: no output directory,
// no batch line, no "still pending".
func TestRunSaysItsProblems(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts NATS, versitygw and a worker on the bundled model")
	}
	root := t.TempDir()
	sys := startSystem(t, nil, systemOptions{fileRoot: root, engine: modelEngine("../../models/tiny-shapes", 1, 24)})
	frames := filepath.Join(root, "frames")
	must(t, os.MkdirAll(frames, 0o755))
	for i := range 3 {
		var buf bytes.Buffer
		must(t, png.Encode(&buf, shapes.NewScene(rand.New(rand.NewPCG(7, uint64(i)))).Image))
		must(t, os.WriteFile(filepath.Join(frames, fmt.Sprintf("scene-%d.png", i)), buf.Bytes(), 0o644))
	}
	for _, name := range []string{"broken-a.jpg", "broken-b.jpg"} {
		must(t, os.WriteFile(filepath.Join(frames, name), []byte(name+" is not a JPEG at all"), 0o644)) // two contents, two jobs
	}

	// An empty query: refused before an output directory or a batch exists.
	empty := filepath.Join(root, "empty")
	code, stdout, stderr := sys.submit(t, "--out", empty, "--query", "", frames)
	if code != ExitUsage || !strings.Contains(stderr, "no query for") || stdout != "" || strings.Contains(stderr, "pending") {
		t.Errorf("empty --query: exit %d, stdout %q, stderr %q; want exit 2 with the reason alone", code, stdout, stderr)
	}
	if _, err := os.Stat(empty); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty --query left %s behind (%v)", empty, err)
	}

	out := filepath.Join(root, "out")
	code, stdout, _ = sys.submit(t, "--out", out, "--query", "red circle, blue square", frames)
	if code != ExitJobsFailed {
		t.Fatalf("exit %d, want %d (two images are corrupt)", code, ExitJobsFailed)
	}
	failedFile := filepath.Join(out, submit.FailedFile)
	for _, want := range []string{
		"2 failed:\n",
		"broken-a.jpg: " + engine.CodeBadImage + ": ",
		"broken-b.jpg: " + engine.CodeBadImage + ": ",
		"every failed job: " + failedFile + "\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, `separates categories with ","`); n != 1 || !strings.Contains(stdout, "(3 jobs)") {
		t.Errorf("the query's warning appears %d times in:\n%s\nwant once, for the 3 jobs that ran", n, stdout)
	}
	data, err := os.ReadFile(failedFile)
	must(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%s: %d lines, want 2:\n%s", submit.FailedFile, len(lines), data)
	}
	for _, line := range lines {
		var f submit.Failure
		must(t, json.Unmarshal([]byte(line), &f))
		if f.ID == "" || !strings.HasPrefix(filepath.Base(f.Source), "broken-") || f.Code != engine.CodeBadImage || f.Message == "" {
			t.Errorf("%s line %s: want a broken image with its id, code and message", submit.FailedFile, line)
		}
	}

	// The same run again with --coco: nothing is published, the same problems are said
	// (the summary speaks of the whole set), and the export, whose one category is the
	// whole comma list no box is labelled with, has no box: it says why there is no
	// results list rather than writing "[]", on which pycocotools' loadRes fails.
	code, stdout, _ = sys.submit(t, "--out", out, "--coco", "--query", "red circle, blue square", frames)
	if code != ExitJobsFailed || !strings.Contains(stdout, "0 submitted, 5 already done") || !strings.Contains(stdout, "(3 jobs)") ||
		!strings.Contains(stdout, "2 failed:\n") {
		t.Errorf("rerun: exit %d:\n%s\nwant the same problems again", code, stdout)
	}
	if n := strings.Count(stdout, "warning: "+submit.ErrNoBoxes.Error()); n != 1 {
		t.Errorf("the export without boxes is said %d times in:\n%s\nwant once", n, stdout)
	}
	if _, err := os.Stat(filepath.Join(out, submit.COCOResultsFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s written for an export without boxes (%v)", submit.COCOResultsFile, err)
	}
}
