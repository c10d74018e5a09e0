package submit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
)

// A rerun does not read an image again while its size and modification time are those
// recorded; a changed modification time (or --rehash) makes it read and hash the file.
func TestPlannerReusesRecordedHashesOfUnchangedFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.jpg")
	must(t, os.WriteFile(path, []byte("first content"), 0o644))
	var recorded []fileRecord
	p := &planner{defaults: JobDefaults{Query: "q", Batch: "b"}, record: func(f fileRecord) error {
		recorded = append(recorded, f)
		return nil
	}}
	it := Item{Image: path, Origin: "a.jpg"}
	first, err := p.plan(context.Background(), it)
	must(t, err)
	if len(recorded) != 1 || recorded[0].URL != "file://"+path || first.Image != "file://"+path {
		t.Fatalf("recorded %+v, job image %s", recorded, first.Image)
	}

	// Same size, same modification time, other bytes: the recorded hash is used, so the
	// file was not read.
	stamp := time.Unix(1700000000, 0)
	must(t, os.WriteFile(path, []byte("other content"), 0o644))
	must(t, os.Chtimes(path, stamp, stamp))
	info, err := os.Stat(path)
	must(t, err)
	p.known = map[string]fileRecord{path: {Path: path, Size: info.Size(), ModTime: info.ModTime().UnixNano(), SHA256: recorded[0].SHA256, URL: recorded[0].URL}}
	recorded = nil
	again, err := p.plan(context.Background(), it)
	must(t, err)
	if again.ID != first.ID || len(recorded) != 0 {
		t.Fatalf("id %s (first %s), %d new records: want the recorded hash reused", again.ID, first.ID, len(recorded))
	}

	// A new modification time: read and hashed again.
	must(t, os.Chtimes(path, stamp.Add(time.Second), stamp.Add(time.Second)))
	changed, err := p.plan(context.Background(), it)
	must(t, err)
	if changed.ID == first.ID || len(recorded) != 1 {
		t.Fatalf("id unchanged or not recorded after the file changed (%d records)", len(recorded))
	}

	// The recorded URL must be the one this run would use: with an upload prefix now, the
	// file:// record does not apply (and without storage the upload fails, proving a read).
	p.known = map[string]fileRecord{path: recorded[0]}
	p.uploadPrefix = "s3://bucket/up/"
	if _, err := p.plan(context.Background(), it); err == nil {
		t.Fatal("a file:// record was reused for an upload run")
	}
}

// --overlay-format png is the default and sends no field: the same job, with the same id,
// as without the flag (workers that predate the field read it). jpeg is a field and
// another job. Without an overlay the format is not sent.
func TestPlannerOverlayFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jpg")
	must(t, os.WriteFile(path, []byte("content"), 0o644))
	plan := func(d JobDefaults) (id string, raw []byte) {
		t.Helper()
		d.Query, d.Batch = "q", "b"
		job, err := (&planner{defaults: d}).plan(context.Background(), Item{Image: path, Origin: "a.jpg"})
		must(t, err)
		raw, err = json.Marshal(job)
		must(t, err)
		return job.ID, raw
	}
	plainID, plainRaw := plan(JobDefaults{Overlay: true})
	pngID, pngRaw := plan(JobDefaults{Overlay: true, OverlayFormat: overlay.PNG})
	if pngID != plainID || string(pngRaw) != string(plainRaw) || strings.Contains(string(pngRaw), "overlay_format") {
		t.Errorf("png: %s, want the job without the flag: %s", pngRaw, plainRaw)
	}
	jpegID, jpegRaw := plan(JobDefaults{Overlay: true, OverlayFormat: overlay.JPEG})
	if jpegID == plainID || !strings.Contains(string(jpegRaw), `"overlay_format":"jpeg"`) {
		t.Errorf("jpeg: id %s (png %s), job %s; want another job carrying the field", jpegID, plainID, jpegRaw)
	}
	if _, raw := plan(JobDefaults{OverlayFormat: overlay.JPEG}); strings.Contains(string(raw), "overlay_format") {
		t.Errorf("no overlay, yet the format is sent: %s", raw)
	}
}

// --generation-mode reaches the job: none sends no field (the worker's LA_GENERATION_MODE
// decides, and the job and its id are those of a submit that predates the flag); ar and
// hybrid are sent, and each is a job of its own.
func TestPlannerGenerationMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jpg")
	must(t, os.WriteFile(path, []byte("content"), 0o644))
	plan := func(mode engine.GenerationMode) (id string, raw []byte) {
		t.Helper()
		job, err := (&planner{defaults: JobDefaults{Query: "q", Batch: "b", GenerationMode: mode}}).plan(context.Background(), Item{Image: path, Origin: "a.jpg"})
		must(t, err)
		if job.GenerationMode != mode {
			t.Errorf("job mode %q, want %q", job.GenerationMode, mode)
		}
		raw, err = json.Marshal(job)
		must(t, err)
		return job.ID, raw
	}
	defaultID, defaultRaw := plan("")
	if strings.Contains(string(defaultRaw), "generation_mode") {
		t.Errorf("no --generation-mode, yet the job names one: %s", defaultRaw)
	}
	ids := map[string]engine.GenerationMode{defaultID: ""}
	for _, mode := range engine.GenerationModes {
		id, raw := plan(mode)
		if !strings.Contains(string(raw), `"generation_mode":"`+string(mode)+`"`) {
			t.Errorf("%s: job %s, want the field", mode, raw)
		}
		if prev, dup := ids[id]; dup {
			t.Errorf("%s: the id of the job in mode %q", mode, prev)
		}
		ids[id] = mode
	}
}
