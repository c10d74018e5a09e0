package httpcompat

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/locateanything/detect/engine/enginetest"
)

// TestModelNamesTheLoadedCheckpoint: with the bundled model (no Hub repository) /info and
// /v1/models say what runs, not the LocateAnything-3B repository.
func TestModelNamesTheLoadedCheckpoint(t *testing.T) {
	h := newHarness(t, setup{configure: func(e *enginetest.Engine) {
		e.Description.Model, e.Description.WeightsRepo, e.Description.WeightsRevision = "tiny-shapes", "", ""
	}})
	status, body := h.get(t, "/info")
	var info map[string]any
	if err := json.Unmarshal(body, &info); err != nil || status != http.StatusOK {
		t.Fatalf("/info: %d %s", status, body)
	}
	if info["model"] != "tiny-shapes" || info["model_id"] != "tiny-shapes" {
		t.Errorf("/info names model %v, model_id %v; want tiny-shapes for both", info["model"], info["model_id"])
	}
	status, body = h.get(t, "/v1/models")
	var models struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &models); err != nil || status != http.StatusOK || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %d %s", status, body)
	}
	if m := models.Data[0]; m.ID != "tiny-shapes" || m.OwnedBy == "nvidia" {
		t.Errorf("/v1/models lists %+v; want tiny-shapes, not owned by nvidia", m)
	}
}
