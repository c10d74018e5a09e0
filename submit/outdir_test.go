package submit

import (
	"os"
	"path/filepath"
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
	must(t, o.markPublished("job1", ""))
	must(t, o.markPublished("job2", ""))
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
	if len(st.Done) != 1 || st.Done["job1"].Source != "a.jpg" {
		t.Errorf("done = %v, want job1 only (the torn line dropped)", st.Done)
	}
	// The torn line is gone from the file, so the next row starts on a line of its own.
	must(t, o.writeRow(Row{Source: "b.jpg", Result: jobs.Result{ID: "job2", Status: jobs.StatusFailed}}))
	must(t, o.sync())
	rows, err := readRows(dir)
	must(t, err)
	if len(rows) != 2 || rows[1].ID != "job2" {
		t.Fatalf("rows = %+v, want job1 then job2", rows)
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
