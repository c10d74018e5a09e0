package httpcompat

import (
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/version"
)

// Fixed facts about the model that the engine does not carry.
const (
	defaultModelID = "nvidia/LocateAnything-3B"
	modelTask      = "open-vocabulary object detection and visual grounding"
	modelInput     = "one image (base64 PNG or JPEG) and a text query; categories joined with </c>"
	modelOutput    = "boxes [x1, y1, x2, y2] in original pixels and 0..1000, points, the raw generated text"
	modelLicense   = "NVIDIA non-commercial research license (the LocateAnything-3B weights)"
	sourceRepo     = "github.com/locateanything/detect"
)

type healthBody struct {
	Status string `json:"status"` // "starting" | "ok"
	Model  string `json:"model"`
	Device string `json:"device"`
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	st := s.ready.Load()
	if st == nil {
		s.writeJSON(w, http.StatusOK, healthBody{Status: "starting", Model: s.opts.Model, Device: s.opts.Device})
		return
	}
	s.writeJSON(w, http.StatusOK, healthBody{Status: "ok", Model: st.info.Model, Device: st.info.Device})
}

// infoBody is GET /info: every field the upstream server's /info lists (docs/background.md,
// "Endpoints"), then what is true of this worker.
type infoBody struct {
	Model      string        `json:"model"`
	ModelID    string        `json:"model_id"`
	Task       string        `json:"task"`
	Tasks      []engine.Task `json:"tasks"`
	IO         ioSummary     `json:"io"`
	Hardware   string        `json:"hardware"`
	DecodeMode string        `json:"decode_mode"`
	// GenerationMode is how a /predict that names none is decoded (LA_GENERATION_MODE) and
	// GenerationModes what generation_mode may name: additions beside the upstream keys.
	GenerationMode  engine.GenerationMode   `json:"generation_mode"`
	GenerationModes []engine.GenerationMode `json:"generation_modes"`
	Precision       string                  `json:"precision"`
	Weights         weightsInfo             `json:"weights"`
	Source          sourceInfo              `json:"source"`
	Limits          limitsInfo              `json:"limits"`
	License         string                  `json:"license"`
	Worker          workerInfo              `json:"worker"`
}

type ioSummary struct {
	Input  string `json:"input"`
	Output string `json:"output"`
}

type weightsInfo struct {
	Repo         string `json:"repo"`
	Revision     string `json:"revision"`
	SnapshotDir  string `json:"snapshot_dir"`
	ExtractedDir string `json:"extracted_dir"` // the Go engine reads the snapshot in place: the same dir
}

type sourceInfo struct {
	Repo     string  `json:"repo"`
	Commit   *string `json:"commit"`   // the commit built from; null when nothing recorded one
	Modified bool    `json:"modified"` // built from a checkout with uncommitted changes
}

type limitsInfo struct {
	CanonicalGrid   *[2]int `json:"canonical_grid"` // [h, w] in 14-px patches; null: each image's own grid
	CanonicalSize   *[2]int `json:"canonical_size"` // [W, H] in pixels; null likewise
	InTokenLimit    int     `json:"in_token_limit"`
	MaxSeqLen       int     `json:"max_seq_len"`
	MaxNewTokens    int     `json:"max_new_tokens"`     // the default budget
	MaxNewTokensCap int     `json:"max_new_tokens_cap"` // the largest a request may ask
	MinQueryChars   int     `json:"min_query_chars"`
	MaxQueryChars   int     `json:"max_query_chars"`
	MaxBodyBytes    int64   `json:"max_body_bytes"`
}

type workerInfo struct {
	Backend engine.BackendKind `json:"backend"` // LA_ENGINE: cpu, ttnn or sim
	// Simulated is true when the backend is the simulated chip (LA_ENGINE=sim): its answers
	// are made up at the chip's speed. An addition, absent for a real engine.
	Simulated bool    `json:"simulated,omitempty"`
	Chips     int     `json:"chips"`
	Queue     *string `json:"queue"` // null when this worker serves HTTP only
	GoVersion string  `json:"go_version"`
	UptimeS   float64 `json:"uptime_s"`
}

func (s *Server) handleInfo(w http.ResponseWriter, _ *http.Request) {
	st := s.ready.Load()
	if st == nil {
		s.writeStarting(w)
		return
	}
	s.writeJSON(w, http.StatusOK, s.info(st.info))
}

// offeredModes are the generation modes the engine can decode in; every mode when the
// engine does not say (a test double).
func offeredModes(in engine.Info) []engine.GenerationMode {
	if in.GenerationModes != nil {
		return in.GenerationModes
	}
	return engine.GenerationModes
}

func (s *Server) info(in engine.Info) infoBody {
	lim := limitsFor(in)
	body := infoBody{
		Model:           in.Model,
		ModelID:         modelID(in),
		Task:            modelTask,
		Tasks:           engine.Tasks,
		IO:              ioSummary{Input: modelInput, Output: modelOutput},
		Hardware:        in.Device,
		DecodeMode:      in.DecodeMode,
		GenerationMode:  s.opts.GenerationMode,
		GenerationModes: offeredModes(in),
		Precision:       in.Precision,
		Weights: weightsInfo{
			Repo: in.WeightsRepo, Revision: in.WeightsRevision,
			SnapshotDir: in.WeightsDir, ExtractedDir: in.WeightsDir,
		},
		Source: s.source,
		Limits: limitsInfo{
			InTokenLimit:    in.InTokenLimit,
			MaxSeqLen:       in.MaxSeqLen,
			MaxNewTokens:    in.MaxNewTokens,
			MaxNewTokensCap: lim.maxNewTokens,
			MinQueryChars:   1,
			MaxQueryChars:   lim.maxQueryChars,
			MaxBodyBytes:    s.cfg.MaxBodyBytes,
		},
		License: modelLicense,
		Worker: workerInfo{
			Backend:   in.Backend,
			Simulated: in.Simulated,
			Chips:     s.opts.Chips,
			GoVersion: runtime.Version(),
			UptimeS:   time.Since(s.started).Round(100 * time.Millisecond).Seconds(),
		},
	}
	if g := in.CanonicalGrid; g[0] > 0 && g[1] > 0 {
		body.Limits.CanonicalGrid = &[2]int{g[0], g[1]}
		body.Limits.CanonicalSize = &[2]int{g[1] * 14, g[0] * 14}
	}
	if s.opts.Queue != "" {
		q := s.opts.Queue
		body.Worker.Queue = &q
	}
	return body
}

// modelID names the loaded checkpoint: its Hub repository when it is one, else the
// engine's model name (the bundled "tiny-shapes"), never a repository it did not load.
func modelID(in engine.Info) string {
	switch {
	case in.WeightsRepo != "":
		return in.WeightsRepo
	case in.Model != "":
		return in.Model
	}
	return defaultModelID
}

// ownedBy is /v1/models' owned_by: nvidia for its repository, else this service.
func ownedBy(id string) string {
	if strings.HasPrefix(id, "nvidia/") {
		return "nvidia"
	}
	return "locateanything-detect"
}

// sourceFrom is /info's source for a build: the commit the binary was built from, however
// it was built (the Makefile's link-time commit, else the toolchain's VCS stamp, as
// internal/version resolves them), or null when nothing recorded one.
func sourceFrom(b version.Info) sourceInfo {
	src := sourceInfo{Repo: sourceRepo, Modified: b.Modified}
	if b.Commit != "" && b.Commit != version.Unknown {
		commit := b.Commit
		src.Commit = &commit
	}
	return src
}

// modelsBody is GET /v1/models: an OpenAI-shaped list so the tt-model ready card does not
// 404. It is not an OpenAI API.
type modelsBody struct {
	Object string       `json:"object"`
	Data   []modelEntry `json:"data"`
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	id := defaultModelID
	if st := s.ready.Load(); st != nil {
		id = modelID(st.info)
	}
	s.writeJSON(w, http.StatusOK, modelsBody{
		Object: "list",
		Data:   []modelEntry{{ID: id, Object: "model", Created: s.started.Unix(), OwnedBy: ownedBy(id)}},
	})
}
