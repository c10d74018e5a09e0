package submit

import (
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/jobs"
)

func TestJobIDIsDeterministicAndCoversEveryParameter(t *testing.T) {
	base := JobParams{Query: "person</c>car", Task: "detect", MaxNewTokens: 128, Overlay: true, Batch: "b1"}
	id := JobID("sha256:abc", base)
	if id != JobID("sha256:abc", base) {
		t.Fatal("same input, different ids")
	}
	if !jobs.ValidToken(id) || len(id) != 64 {
		t.Fatalf("id %q is not a valid 64-character job id", id)
	}
	variants := map[string]string{
		"image":   JobID("sha256:abd", base),
		"query":   JobID("sha256:abc", JobParams{Query: "person", Task: "detect", MaxNewTokens: 128, Overlay: true, Batch: "b1"}),
		"task":    JobID("sha256:abc", JobParams{Query: "person</c>car", Task: "ground", MaxNewTokens: 128, Overlay: true, Batch: "b1"}),
		"budget":  JobID("sha256:abc", JobParams{Query: "person</c>car", Task: "detect", MaxNewTokens: 64, Overlay: true, Batch: "b1"}),
		"overlay": JobID("sha256:abc", JobParams{Query: "person</c>car", Task: "detect", MaxNewTokens: 128, Batch: "b1"}),
		"batch":   JobID("sha256:abc", JobParams{Query: "person</c>car", Task: "detect", MaxNewTokens: 128, Overlay: true, Batch: "b2"}),
		"overlay format": JobID("sha256:abc", JobParams{Query: "person</c>car", Task: "detect", MaxNewTokens: 128, Overlay: true,
			OverlayFormat: overlay.JPEG, Batch: "b1"}),
		"hybrid": JobID("sha256:abc", JobParams{Query: "person</c>car", Task: "detect", MaxNewTokens: 128, Overlay: true,
			GenerationMode: engine.GenerationHybrid, Batch: "b1"}),
		"ar": JobID("sha256:abc", JobParams{Query: "person</c>car", Task: "detect", MaxNewTokens: 128, Overlay: true,
			GenerationMode: engine.GenerationAR, Batch: "b1"}),
	}
	seen := map[string]string{id: "base"}
	for what, v := range variants {
		if prev, dup := seen[v]; dup {
			t.Errorf("changing %s gives the id of %s", what, prev)
		}
		seen[v] = what
	}
	// The id of a job with a PNG overlay (no overlay_format) and the worker's generation
	// mode (no generation_mode) is the one submit gave it before either field existed, so a
	// rerun of an older batch finds its jobs.
	if id != "e3934f722e3822d3fa53149d7d810d002db46e5915d029bba2e10e137b62c1c7" {
		t.Errorf("the id scheme changed: %s", id)
	}
	// Fields must not run into each other: moving a character between two fields changes the id.
	a := JobID("sha256:abc", JobParams{Query: "ab", Task: "c"})
	b := JobID("sha256:abc", JobParams{Query: "a", Task: "bc"})
	if a == b {
		t.Error("fields are not delimited")
	}
}
