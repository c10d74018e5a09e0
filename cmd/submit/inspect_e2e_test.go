package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/submit"
)

// writePNG writes a small PNG, distinct for each seed, at path (creating its folder).
func writePNG(t *testing.T, path string, seed int) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 8, 6))
	img.Set(1, 1, color.RGBA{R: uint8(seed), G: uint8(seed >> 8), B: 99, A: 255})
	var buf bytes.Buffer
	must(t, png.Encode(&buf, img))
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

// A tree of frames through the real queue and worker: the output directory mirrors it
// (results/<path>.json, overlays/<path>.png), names that would collide are told apart by
// job id, and every row and file still records the job id. Flags come after the input.
// Then status finds a job by its path, its path below the input, its id prefix, and the
// queue overview and batches list it, in text and JSON; a dry run counts what is done and
// what a new frame would add, without publishing or writing.
func TestEndToEndOutputMirrorsTheInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	root := t.TempDir()
	sys := startSystem(t, enginetest.New(), systemOptions{fileRoot: root})
	frames := filepath.Join(root, "frames")
	files := []string{"cam04/000123.png", "cam04/000124.png", "cam05/000123.png", "cam05/night/000001.png", "cam04/dup.png", "cam04/dup.jpg"}
	for i, f := range files {
		writePNG(t, filepath.Join(frames, filepath.FromSlash(f)), i)
	}
	out := filepath.Join(root, "out")
	args := []string{frames, "--out", out, "--query", "cat</c>dog", "--overlay", "--batch", "cams"}
	code, stdout, _ := sys.submit(t, args...)
	if code != ExitOK || !strings.Contains(stdout, "6 submitted, 0 already done, 6 succeeded, 0 failed") {
		t.Fatalf("exit %d, %q", code, stdout)
	}

	rows := readResults(t, out)
	byFile := map[string]submit.Row{}
	for _, r := range rows {
		byFile[r.File] = r
	}
	for _, f := range files {
		r, ok := byFile[f]
		if !ok {
			t.Errorf("no row with file %s (rows: %v)", f, slices.Collect(func(yield func(string) bool) {
				for k := range byFile {
					if !yield(k) {
						return
					}
				}
			}))
			continue
		}
		stem := strings.TrimSuffix(f, filepath.Ext(f))
		if strings.HasPrefix(f, "cam04/dup.") {
			stem += "." + r.ID[:12] // dup.png and dup.jpg would share cam04/dup
		}
		if r.JSONFile != "results/"+stem+".json" || r.OverlayFile != "overlays/"+stem+".png" {
			t.Errorf("%s: json_file %q overlay_file %q, want results/%s.json and overlays/%s.png", f, r.JSONFile, r.OverlayFile, stem, stem)
		}
		data, err := os.ReadFile(filepath.Join(out, r.JSONFile))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		var perImage submit.Row
		if err := json.Unmarshal(data, &perImage); err != nil || perImage.ID != r.ID || perImage.File != f ||
			perImage.Source != filepath.Join(frames, filepath.FromSlash(f)) || perImage.Status != jobs.StatusSucceeded {
			t.Errorf("%s: the per-image JSON %s is not its row (id %s, file %s, source %s, %v)", f, r.JSONFile, perImage.ID, perImage.File, perImage.Source, err)
		}
		if bytes.Contains(data, []byte(`\u003c`)) {
			t.Errorf("%s: the per-image JSON escapes < (grep would not find </c>)", r.JSONFile)
		}
		if pic, err := os.ReadFile(filepath.Join(out, r.OverlayFile)); err != nil || !bytes.HasPrefix(pic, []byte("\x89PNG")) {
			t.Errorf("%s: overlay %s: %v", f, r.OverlayFile, err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(out, submit.OverlaysDir)); len(entries) != 2 { // cam04/, cam05/
		t.Errorf("overlays/ holds %d entries, want the two camera folders", len(entries))
	}

	// status by the path as given, by the path below the input, by an id prefix; the path
	// also without the output directory (found by its file:// URL on LA_RESULTS).
	target := byFile["cam05/night/000001.png"]
	for _, a := range [][]string{
		{"status", "--out", out, filepath.Join(frames, "cam05", "night", "000001.png")},
		{"status", "cam05/night/000001.png", "--out", out},
		{"status", filepath.Join(frames, "cam05", "night", "000001.png")},
		{"status", target.ID[:8]},
	} {
		code, stdout, _ := sys.submit(t, a...)
		if code != ExitOK || !strings.Contains(stdout, "job "+target.ID+": succeeded") || strings.Count(stdout, "job ") != 1 {
			t.Errorf("%q: exit %d, %q; want the one job %s", a, code, stdout, target.ID)
		}
	}
	code, stdout, _ = sys.submit(t, "status", "--json", target.ID[:6])
	var js submit.JobStatus
	if err := json.Unmarshal([]byte(stdout), &js); code != ExitOK || err != nil || js.ID != target.ID || js.Status != "succeeded" ||
		js.Result == nil || js.Result.Batch != "cams" {
		t.Errorf("status --json by prefix: exit %d, %v, %+v", code, err, js)
	}
	code, stdout, _ = sys.submit(t, "status", "--json", "--out", out, filepath.Join(frames, "cam04", "000123.png"))
	var list []submit.JobStatus
	if err := json.Unmarshal([]byte(stdout), &list); code != ExitOK || err != nil || len(list) != 1 || list[0].ID != byFile["cam04/000123.png"].ID {
		t.Errorf("status --json by source: exit %d, %v, %q", code, err, stdout)
	}
	code, _, stderr := sys.submit(t, "status", "--out", out, filepath.Join(frames, "nowhere.png"))
	if code != ExitUsage || !strings.Contains(stderr, "no job was made from") {
		t.Errorf("status of an image never submitted: exit %d, %q", code, stderr)
	}
	// Two ids sharing a prefix: the prefix is ambiguous, and says which ids it matches.
	kv, err := sys.js.KeyValue(t.Context(), jobs.StateBucket)
	must(t, err)
	for _, id := range []string{"zzzz-one", "zzzz-two"} {
		_, err := kv.Put(t.Context(), id, []byte(`{"status":"queued"}`))
		must(t, err)
	}
	code, _, stderr = sys.submit(t, "status", "zzzz")
	if code != ExitUsage || !strings.Contains(stderr, "zzzz-one, zzzz-two") {
		t.Errorf("an ambiguous prefix: exit %d, %q", code, stderr)
	}

	// The queue at a glance and the batches, in text and JSON.
	code, stdout, _ = sys.submit(t, "status")
	if code != ExitOK || !strings.Contains(stdout, "0 jobs in the queue (queued or running), 0 dead-lettered") || !strings.Contains(stdout, "cams ") {
		t.Errorf("status: exit %d, %q", code, stdout)
	}
	var ov submit.Overview
	code, stdout, _ = sys.submit(t, "status", "--json")
	if err := json.Unmarshal([]byte(stdout), &ov); code != ExitOK || err != nil || len(ov.Batches) != 1 || ov.Batches[0].Batch != "cams" ||
		ov.Batches[0].Finished != 6 || ov.Batches[0].Results[jobs.StatusSucceeded] != 6 || ov.Batches[0].Last.IsZero() {
		t.Errorf("status --json: exit %d, %v, %+v", code, err, ov)
	}
	var batches []submit.BatchStatus
	code, stdout, _ = sys.submit(t, "batches", "--json")
	if err := json.Unmarshal([]byte(stdout), &batches); code != ExitOK || err != nil || len(batches) != 1 || batches[0].Finished != 6 {
		t.Errorf("batches --json: exit %d, %v, %q", code, err, stdout)
	}
	code, stdout, _ = sys.submit(t, "batches")
	if code != ExitOK || !strings.Contains(stdout, "BATCH") || !strings.Contains(stdout, "cams ") {
		t.Errorf("batches: exit %d, %q", code, stdout)
	}
	var bs submit.BatchStatus
	code, stdout, _ = sys.submit(t, "status", "--batch", "cams", "--json")
	if err := json.Unmarshal([]byte(stdout), &bs); code != ExitOK || err != nil || bs.Finished != 6 || bs.InQueue != 0 {
		t.Errorf("status --batch --json: exit %d, %v, %q", code, err, stdout)
	}

	// A dry run: everything is done; a new frame would be the one job submitted. Nothing
	// is published and the output directory is left as it was.
	code, stdout, _ = sys.submit(t, append([]string{"run", "--dry-run"}, args...)...)
	if code != ExitOK || !strings.Contains(stdout, "0 would be submitted, 6 already done (6 succeeded, 0 failed), 0 queued before and waited for; 6 jobs in all") {
		t.Errorf("dry run: exit %d, %q", code, stdout)
	}
	writePNG(t, filepath.Join(frames, "cam06", "000001.png"), 77)
	before, err := os.ReadFile(filepath.Join(out, submit.StateFile))
	must(t, err)
	info, err := sys.topo.Jobs.Info(t.Context())
	must(t, err)
	var plan submit.DryRunReport
	code, stdout, _ = sys.submit(t, append([]string{"run", "--dry-run", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(stdout), &plan); code != ExitOK || err != nil || plan.ToSubmit != 1 || plan.AlreadyDone != 6 ||
		plan.Total != 7 || !plan.StateChecked || plan.Batch != "cams" || len(plan.Jobs) != 1 || plan.Jobs[0].File != "cam06/000001.png" || plan.Jobs[0].ID == "" {
		t.Errorf("dry run --json: exit %d, %v, %+v", code, err, plan)
	}
	after, err := os.ReadFile(filepath.Join(out, submit.StateFile))
	must(t, err)
	info2, err := sys.topo.Jobs.Info(t.Context())
	must(t, err)
	if !bytes.Equal(before, after) || info2.State.LastSeq != info.State.LastSeq {
		t.Errorf("the dry run wrote the state file (%d -> %d bytes) or published (%d -> %d)", len(before), len(after), info.State.LastSeq, info2.State.LastSeq)
	}
	code, stdout, _ = sys.submit(t, args...)
	if code != ExitOK || !strings.Contains(stdout, "1 submitted, 6 already done, 7 succeeded, 0 failed") {
		t.Errorf("the run after the dry run: exit %d, %q", code, stdout)
	}
	if got := readResults(t, out); len(got) != 7 || got[6].ID != plan.Jobs[0].ID {
		t.Errorf("the new frame's job is not the one the dry run named: %d rows", len(got))
	}

	// A dry run into a new directory: every job would be submitted under a batch not yet
	// named, so no ids are given, and the directory is not even created.
	fresh := filepath.Join(root, "fresh")
	code, stdout, _ = sys.submit(t, "run", "--dry-run", "--json", "--out", fresh, "--query", "cat", frames)
	plan = submit.DryRunReport{}
	if err := json.Unmarshal([]byte(stdout), &plan); code != ExitOK || err != nil || plan.ToSubmit != 7 || plan.Batch != "" || plan.Jobs[0].ID != "" {
		t.Errorf("dry run into a new directory: exit %d, %v, %+v", code, err, plan)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("the dry run created %s: %v", fresh, err)
	}
}

// dlq list --batch keeps the dead-lettered jobs of one batch; the batch is shown in the
// table and in JSON.
func TestEndToEndDLQListByBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	sys := startSystem(t, enginetest.New(), systemOptions{})
	dir := t.TempDir()
	missing := map[string]string{} // batch -> the job id of its missing image
	for _, batch := range []string{"north", "south"} {
		manifest := filepath.Join(dir, batch+".csv")
		must(t, os.WriteFile(manifest, []byte("image,query\ns3://images/absent/"+batch+".png,dog\n"), 0o644))
		code, stdout, _ := sys.submit(t, "--out", filepath.Join(dir, batch), "--batch", batch, manifest)
		if code != ExitJobsFailed || !strings.Contains(stdout, "1 submitted, 0 already done, 0 succeeded, 1 failed") {
			t.Fatalf("batch %s: exit %d, %q", batch, code, stdout)
		}
		missing[batch] = readResults(t, filepath.Join(dir, batch))[0].ID
	}
	code, stdout, _ := sys.submit(t, "dlq", "list")
	if code != ExitOK || !strings.Contains(stdout, missing["north"]+"  north") || !strings.Contains(stdout, missing["south"]+"  south") {
		t.Errorf("dlq list: exit %d, %q", code, stdout)
	}
	code, stdout, _ = sys.submit(t, "dlq", "list", "--batch", "north")
	if code != ExitOK || !strings.Contains(stdout, missing["north"]) || strings.Contains(stdout, missing["south"]) {
		t.Errorf("dlq list --batch north: exit %d, %q", code, stdout)
	}
	var entries []submit.DLQEntry
	code, stdout, _ = sys.submit(t, "dlq", "list", "--json", "--batch", "south")
	if err := json.Unmarshal([]byte(stdout), &entries); code != ExitOK || err != nil || len(entries) != 1 ||
		entries[0].Batch != "south" || entries[0].Record.ID != missing["south"] || entries[0].Record.Code != jobs.CodeNotFound {
		t.Errorf("dlq list --json --batch south: exit %d, %v, %q", code, err, stdout)
	}
	code, stdout, _ = sys.submit(t, "dlq", "list", "--json", "--batch", "east")
	if code != ExitOK || strings.TrimSpace(stdout) != "[]" {
		t.Errorf("dlq list of a batch without dead letters: exit %d, %q", code, stdout)
	}
	code, stdout, _ = sys.submit(t, "dlq", "show", "--json", missing["north"])
	var rec jobs.DLQRecord
	if err := json.Unmarshal([]byte(stdout), &rec); code != ExitOK || err != nil || rec.ID != missing["north"] {
		t.Errorf("dlq show --json: exit %d, %v", code, err)
	}
}
