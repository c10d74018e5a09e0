package submit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
)

// JobParams are the settings that, together with the image, make a job what it is. Two
// jobs with equal image identity and equal JobParams are the same job and get the same id.
type JobParams struct {
	Query        string      `json:"query"`
	Task         engine.Task `json:"task"`
	MaxNewTokens int         `json:"max_new_tokens"`
	// GenerationMode is empty for the worker's default, so that the ids of such jobs stay
	// those an earlier submit gave them.
	GenerationMode engine.GenerationMode `json:"generation_mode,omitempty"`
	Overlay        bool                  `json:"overlay"`
	// OverlayFormat is empty for PNG, the default, so that the ids of PNG-overlay jobs
	// stay those an earlier submit gave them.
	OverlayFormat overlay.Format `json:"overlay_format,omitempty"`
	Batch         string         `json:"batch"`
}

// idVersion is hashed into every id, so a change of the scheme can never collide with ids
// made by an older submit.
const idVersion = "la-submit-id/1"

// JobID is the deterministic id of a job: the hex SHA-256 of the image identity and the
// parameters: 64 characters of [0-9a-f], inside the wire contract's 128-character id rule,
// so the whole 256-bit digest is kept. imageIdentity is "sha256:<hex>" of the image bytes for local files, and
// the URL for remote objects, whose content this tool does not download.
//
// The batch is part of the id so that the same image submitted in two batches is two
// jobs, each with its result on its own batch's subject.
func JobID(imageIdentity string, p JobParams) string {
	// JSON of a fixed struct is an unambiguous encoding: no field can run into the next.
	enc, _ := json.Marshal(struct {
		V     string    `json:"v"`
		Image string    `json:"image"`
		P     JobParams `json:"p"`
	}{idVersion, imageIdentity, p})
	sum := sha256.Sum256(enc)
	return hex.EncodeToString(sum[:])
}
