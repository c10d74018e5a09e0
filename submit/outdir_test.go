package submit

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/locateanything/detect/jobs"
)

func TestOutDirResumesAndCutsATornLastLine(t *testing.T) {
	dir := t.TempDir()
	o, st, err := openOutDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.HasHeader || len(st.Done) != 0 {
		t.Fatalf("fresh directory has state %+v", st)
	}
	must(t, o.writeHeader(stateHeader{Batch: "b1", Class: "default"}))
	job1 := &jobs.Job{V: jobs.SchemaVersion, ID: "job1", Image: "file:///in/a.jpg", Query: "dog</c>cat", Overlay: true, Batch: "b1"}
	must(t, o.markPublished(job1, "a.jpg", false))
	must(t, o.markPublished(&jobs.Job{ID: "job2"}, "", false))
	must(t, o.writeRow(Row{Source: "a.jpg", Result: jobs.Result{ID: "job1", Status: jobs.StatusSucceeded}}))
	must(t, o.close())

	// A crash in the middle of a write leaves half a line.
	f, err := os.OpenFile(filepath.Join(dir, ResultsFile), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(`{"source":"b.jpg","id":"job2","sta`)
	must(t, err)
	must(t, f.Close())

	o, st, err = openOutDir(dir)
	must(t, err)
	defer o.close()
	if !st.HasHeader || st.Header.Batch != "b1" {
		t.Errorf("header = %+v, want batch b1", st.Header)
	}
	if !st.Published["job1"] || !st.Published["job2"] || len(st.Published) != 2 {
		t.Errorf("published = %v, want job1 and job2", st.Published)
	}
	if got := st.Jobs["job1"]; got == nil || !reflect.DeepEqual(got, job1) || st.Sources["job1"] != "a.jpg" {
		t.Errorf("job1 recorded as %+v from %q, want %+v from a.jpg (what retry --canceled publishes again)", got, st.Sources["job1"], job1)
	}
	if len(st.Done) != 1 || st.Done["job1"].Source != "a.jpg" {
		t.Errorf("done = %v, want job1 only (the torn line dropped)", st.Done)
	}
	// The torn line is gone from the file, so the next row starts on a line of its own.
	must(t, o.writeRow(Row{Source: "b.jpg", Result: jobs.Result{ID: "job2", Status: jobs.StatusFailed}}))
	must(t, o.sync())
	rows, err := ReadRows(dir)
	must(t, err)
	if len(rows) != 2 || rows[1].ID != "job2" {
		t.Fatalf("rows = %+v, want job1 then job2", rows)
	}
}

// TestResultsLinesArePlainUTF8: results.jsonl writes <, > and & as they are (no \u003c),
// so a query or answer can be found with grep, and the lines read back the same.
func TestResultsLinesArePlainUTF8(t *testing.T) {
	dir := t.TempDir()
	o, _, err := openOutDir(dir)
	must(t, err)
	row := Row{Source: "a&b.jpg", Result: jobs.Result{ID: "job1", Status: jobs.StatusSucceeded,
		Answer: jobs.Answer{Query: "person</c>car", RawText: "<ref>person</ref><box>None</box>"}, Metadata: []byte(`{"note":"<é>"}`)}}
	must(t, o.writeRow(row))
	must(t, o.close())
	data, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	must(t, err)
	for _, want := range []string{`"source":"a&b.jpg"`, `"query":"person</c>car"`, `"raw_text":"<ref>person</ref><box>None</box>"`, `"metadata":{"note":"<é>"}`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("results.jsonl lacks %s: %s", want, data)
		}
	}
	if strings.Count(string(data), "\n") != 1 {
		t.Errorf("want one line: %q", data)
	}
	rows, err := ReadRows(dir)
	must(t, err)
	if len(rows) != 1 || rows[0].Query != row.Query || rows[0].RawText != row.RawText || rows[0].Source != row.Source {
		t.Errorf("read back %+v", rows)
	}
}

func TestOutDirRejectsACorruptMiddleLine(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, ResultsFile), []byte("{\"id\":\"a\"}\ngarbage\n{\"id\":\"b\"}\n"), 0o644))
	_, _, err := openOutDir(dir)
	if err == nil {
		t.Fatal("a corrupt line in the middle was accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
