package main

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/submit"
)

// `submit clean` removes what workers stored for results, batch by batch or by age: the
// listing without --yes removes nothing, --batch removes that batch's result JSON and
// overlays and leaves the other batch's, and --older-than reaches every batch by the
// time its results finished. It runs on both stores workers write to: S3 (the images
// uploaded, the results under s3://results/out/) and the single-machine setup (file://
// images and results under LA_FILE_ROOTS).
func TestEndToEndCleanStoredResults(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	t.Run("s3", func(t *testing.T) {
		sys := startSystem(t, enginetest.New(), systemOptions{})
		testCleanStoredResults(t, sys, t.TempDir(), "--upload", "s3://images/up/")
	})
	t.Run("file", func(t *testing.T) {
		root := t.TempDir()
		sys := startSystem(t, enginetest.New(), systemOptions{fileRoot: root})
		if !strings.HasPrefix(sys.output, "file://") {
			t.Fatalf("the file setup stores results at %s", sys.output)
		}
		testCleanStoredResults(t, sys, root)
	})
}

// testCleanStoredResults submits batches a and b from dir (with extra, such as an upload,
// on each submit) and cleans their stored files.
func testCleanStoredResults(t *testing.T, sys *system, dir string, extra ...string) {
	writeImages(t, filepath.Join(dir, "a"), 2)
	writeImages(t, filepath.Join(dir, "b"), 1)
	stored := map[string][]string{} // batch -> the URLs of its stored files
	for _, batch := range []string{"a", "b"} {
		out := filepath.Join(dir, "out-"+batch)
		args := append([]string{"--out", out, "--batch", batch, "--query", "dog", "--overlay"}, extra...)
		code, stdout, _ := sys.submit(t, append(args, filepath.Join(dir, batch))...)
		if code != ExitOK {
			t.Fatalf("batch %s: exit %d, %q", batch, code, stdout)
		}
		rows, err := submit.ReadRows(out)
		must(t, err)
		for _, r := range rows {
			if r.ResultURL == "" || r.OverlayURL == nil {
				t.Fatalf("row %s stores no result or overlay: %+v", r.ID, r)
			}
			if !strings.HasPrefix(r.ResultURL, sys.output) {
				t.Fatalf("row %s: result stored at %s, want under %s", r.ID, r.ResultURL, sys.output)
			}
			stored[batch] = append(stored[batch], r.ResultURL, *r.OverlayURL)
		}
	}
	exists := func(url string) bool {
		_, err := sys.store.Stat(t.Context(), url)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	count := func(batch string) (n int) {
		for _, u := range stored[batch] {
			if exists(u) {
				n++
			}
		}
		return n
	}
	if count("a") != 4 || count("b") != 2 {
		t.Fatalf("stored before cleaning: a %d, b %d; want 4 and 2", count("a"), count("b"))
	}
	// The console's thumbnail and a spilled job of one result of batch a, beside its files.
	first := stored["a"][0] // <output><id>.json
	base := strings.TrimSuffix(first, ".json")
	for _, u := range []string{base + jobs.ThumbSuffix, base + ".job.json"} {
		must(t, sys.store.Put(t.Context(), u, []byte("x"), ""))
		stored["a"] = append(stored["a"], u)
	}

	code, stdout, _ := sys.submit(t, "clean", "--batch", "a")
	// 2 JSON, 2 overlays, 1 thumbnail and 1 spilled job; the other result has neither
	if code != ExitOK || strings.Count(stdout, "would remove ") != 6 || strings.Count(stdout, jobs.ThumbSuffix) != 1 || count("a") != 6 {
		t.Errorf("listing: exit %d, %q, a has %d files; want the 6 stored files listed and nothing removed", code, stdout, count("a"))
	}
	code, stdout, _ = sys.submit(t, "clean", "--batch", "a", "--yes")
	if code != ExitOK || count("a") != 0 || count("b") != 2 {
		t.Errorf("clean --batch a: exit %d, %q; a keeps %d files, b %d; want 0 and 2", code, stdout, count("a"), count("b"))
	}

	code, stdout, _ = sys.submit(t, "clean", "--older-than", "1d", "--yes", "--json")
	var rep submit.CleanReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || rep.Results != 0 || count("b") != 2 {
		t.Errorf("clean --older-than 1d: exit %d, %q; want nothing that old", code, stdout)
	}
	time.Sleep(20 * time.Millisecond)
	code, stdout, _ = sys.submit(t, "clean", "--older-than", "10ms", "--yes")
	if code != ExitOK || count("b") != 0 || !strings.Contains(stdout, "3 results") {
		t.Errorf("clean --older-than 10ms: exit %d, %q; b keeps %d files; want every result's files gone", code, stdout, count("b"))
	}

	for _, bad := range [][]string{{"clean"}, {"clean", "--batch", "a", "--older-than", "1d"}, {"clean", "--older-than", "soon"}} {
		if code, _, _ := sys.submit(t, bad...); code != ExitUsage {
			t.Errorf("submit %q: exit %d, want %d", bad, code, ExitUsage)
		}
	}
}
