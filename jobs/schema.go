package jobs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
)

// SchemaVersion is the job schema this package reads and writes (the `v` field).
const SchemaVersion = 1

// Subjects, streams and buckets of the wire contract (README, "Wire contract").
const (
	JobSubjectPrefix    = "la.jobs."    // la.jobs.<class>
	ResultSubjectPrefix = "la.results." // la.results.<batch>.<id>
	DLQSubjectPrefix    = "la.dlq."     // la.dlq.<id>
	DefaultClass        = "default"
	DefaultBatch        = "default"

	JobsStream    = "LA_JOBS"
	ResultsStream = "LA_RESULTS"
	DLQStream     = "LA_DLQ"
	StateBucket   = "LA_JOB_STATE"
	ConsumerName  = "la-workers"

	MaxQueryChars = engine.MaxQueryChars
)

// JobSubject is the subject a job of the given class is published to.
func JobSubject(class string) string { return JobSubjectPrefix + class }

// ResultSubject is the subject the result of job id in batch is published to.
func ResultSubject(batch, id string) string { return ResultSubjectPrefix + batch + "." + id }

// Job is one detection request on the queue.
type Job struct {
	V            int         `json:"v,omitempty"`
	ID           string      `json:"id"`
	Image        string      `json:"image"` // s3://bucket/key or file:///abs/path
	Query        string      `json:"query"`
	Task         engine.Task `json:"task,omitempty"`
	MaxNewTokens int         `json:"max_new_tokens,omitempty"`
	// GenerationMode is how the answer is decoded: "ar" or "hybrid"; empty means the
	// worker's LA_GENERATION_MODE (and keeps the job readable by workers that predate it).
	GenerationMode engine.GenerationMode `json:"generation_mode,omitempty"`
	Overlay        bool                  `json:"overlay,omitempty"`
	// OverlayFormat is how the overlay is encoded: "png" (also when empty) or "jpeg".
	// Left empty rather than filled in, so that a job for a PNG overlay stays readable
	// by workers that predate the field (they refuse unknown fields).
	OverlayFormat overlay.Format  `json:"overlay_format,omitempty"`
	Output        string          `json:"output,omitempty"` // URL prefix for result files
	Batch         string          `json:"batch,omitempty"`
	Deadline      *time.Time      `json:"deadline,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"` // a JSON object, echoed back
}

// Status is a job's outcome, or its state in the state bucket.
type Status string

const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCanceled  Status = "canceled"
	StatusExpired   Status = "expired"
)

// Terminal reports whether s ends a job.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCanceled || s == StatusExpired
}

// Error codes of failed results beyond engine.Code*.
const (
	CodeInvalidJob     = "invalid_job"      // malformed JSON, unknown field, bad value
	CodeBadURL         = "bad_url"          // unparsable or unknown-scheme image URL
	CodeNotFound       = "not_found"        // the image object does not exist
	CodeEmptyImage     = "empty_image"      // 0-byte object
	CodeMaxDeliveries  = "max_deliveries"   // retried MaxDeliver times
	CodeInternal       = "internal"         // a bug or an engine failure
	CodeStorageFailure = "storage_failure"  // result could not be written
	CodeDeadline       = "deadline_expired" // deadline passed before start
	CodeCanceled       = "canceled"         // cancel requested
)

// ErrorInfo says why a job did not succeed.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// JobTiming is the per-stage wall time of one job in milliseconds.
type JobTiming struct {
	QueueWait  float64 `json:"queue_wait"`
	Fetch      float64 `json:"fetch"`
	Preprocess float64 `json:"preprocess"`
	Vision     float64 `json:"vision"`
	Prefill    float64 `json:"prefill"`
	Decode     float64 `json:"decode"`
	Upload     float64 `json:"upload"`
	Total      float64 `json:"total"`
	DecodeTokS float64 `json:"decode_tok_s"`
}

// Answer is the model's answer as a result carries it: the fields of the /predict
// response with the same keys and meaning, less the inline overlay (a job's overlay is a
// stored file, Result.OverlayURL) and the timing (Result.TimingMS has the job's stages),
// plus generation_mode, and decode_steps for every answer (/predict writes it only for
// hybrid ones, to keep the upstream bytes of the others).
type Answer struct {
	Query              string             `json:"query"`
	Width              int                `json:"width"`
	Height             int                `json:"height"`
	CanonicalSize      [2]int             `json:"canonical_size"`
	GridHW             [2]int             `json:"grid_hw"`
	NumImageTokens     int                `json:"num_image_tokens"`
	PromptTokens       int                `json:"prompt_tokens"`
	PrefillTokens      int                `json:"prefill_tokens"`
	RawText            string             `json:"raw_text"`
	Detections         []engine.Detection `json:"detections"`
	Points             []engine.Point     `json:"points"`
	NumGeneratedTokens int                `json:"num_generated_tokens"`
	// GenerationMode is how the answer was decoded (ar or hybrid); absent when the job did
	// not run. DecodeSteps is the device steps after the prefill: an AR answer takes one
	// per token after the first, a hybrid one fewer when whole boxes came in one step.
	GenerationMode engine.GenerationMode `json:"generation_mode,omitempty"`
	DecodeSteps    int                   `json:"decode_steps"`
	StoppedOnEOS   bool                  `json:"stopped_on_eos"`
	DecodeMode     string                `json:"decode_mode"`
	// Warnings say what looks wrong with the query though it ran as written (a list
	// without </c>, an empty category); absent when nothing does.
	Warnings []string `json:"warnings,omitempty"`
	// Simulated marks an answer of the simulated chip (LA_ENGINE=sim): made up, not the
	// model's; absent for a real one.
	Simulated bool `json:"simulated,omitempty"`
}

// answerOf is p as a result carries it.
func answerOf(p *engine.Prediction) Answer {
	a := Answer{
		Query: p.Query, Width: p.Width, Height: p.Height, CanonicalSize: p.CanonicalSize, GridHW: p.GridHW,
		NumImageTokens: p.NumImageTokens, PromptTokens: p.PromptTokens, PrefillTokens: p.PrefillTokens,
		RawText: p.RawText, Detections: p.Detections, Points: p.Points,
		NumGeneratedTokens: p.NumGeneratedTokens, StoppedOnEOS: p.StoppedOnEOS, DecodeMode: p.DecodeMode,
		// An engine that names no mode decodes one token per step.
		GenerationMode: cmp.Or(p.GenerationMode, engine.GenerationAR), DecodeSteps: p.DecodeSteps,
		Warnings: p.Warnings, Simulated: p.Simulated,
	}
	if a.Detections == nil {
		a.Detections = []engine.Detection{}
	}
	if a.Points == nil {
		a.Points = []engine.Point{}
	}
	return a
}

// emptyAnswer is the answer of a job that did not run: lists empty, never null.
func emptyAnswer(query string) Answer {
	return Answer{Query: query, Detections: []engine.Detection{}, Points: []engine.Point{}}
}

// Result is what a worker publishes and stores for a job: the model's answer (zero values
// when the job did not run) and the job's own fields.
type Result struct {
	Answer
	ID         string     `json:"id"`
	Status     Status     `json:"status"`
	Error      *ErrorInfo `json:"error,omitempty"`
	Attempt    int        `json:"attempt"`
	Worker     string     `json:"worker"`
	Model      string     `json:"model,omitempty"` // the checkpoint that answered (engine.Info.Model)
	OverlayURL *string    `json:"overlay"`
	// OverlayFormat is the encoding of the stored overlay ("png" or "jpeg"); absent
	// when there is none.
	OverlayFormat overlay.Format  `json:"overlay_format,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	Batch         string          `json:"batch"`
	Image         string          `json:"image"`
	Task          engine.Task     `json:"task"`
	TimingMS      JobTiming       `json:"timing_ms"`
	FinishedAt    time.Time       `json:"finished_at"`

	// ResultURL is where this result is stored in full: <output>/<id>.json, or under the
	// worker's default output when the job's own refused it; absent when it could not be
	// stored.
	ResultURL string `json:"result_url,omitempty"`
	// Truncated marks a published result too large for one NATS message: metadata,
	// raw_text, detections and points are left out (the lists empty); ResultURL has them.
	Truncated bool `json:"truncated,omitempty"`
}

// OverlayEncoding is the format the job's overlay is stored in: OverlayFormat, PNG when
// it is empty.
func (j *Job) OverlayEncoding() overlay.Format {
	if j.OverlayFormat == "" {
		return overlay.PNG
	}
	return j.OverlayFormat
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidToken reports whether s can be a job id, batch or class: 1-128 chars of
// [A-Za-z0-9_-], so it is a valid subject token and KV key.
func ValidToken(s string) bool { return tokenRE.MatchString(s) }

// DecodeJob parses a job message strictly (decodeJobFields: exact names, each once, no
// unknown field, no null, the schema's types), fills defaults and validates it. The error
// says which field is wrong. A job that fails here has no usable id when the error is
// about the id itself; the caller then falls back to the message id.
func DecodeJob(data []byte) (*Job, error) {
	j, err := decodeJobFields(data)
	if err != nil {
		return j, err
	}
	if err := j.Validate(); err != nil {
		return j, err
	}
	return j, nil
}

// Validate fills defaults and checks every field.
func (j *Job) Validate() error {
	if err := j.checkOutput(); err != nil { // first: a failure is never stored below it
		return err
	}
	if j.V != 0 && j.V != SchemaVersion {
		return fmt.Errorf("field v: schema version %d is not supported (this worker reads %d)", j.V, SchemaVersion)
	}
	if !ValidToken(j.ID) {
		return fmt.Errorf("field id: %q must be 1-128 characters of [A-Za-z0-9_-]", j.ID)
	}
	if j.Image == "" {
		return fmt.Errorf("field image: required (s3://bucket/key or file:///abs/path)")
	}
	n := utf8.RuneCountInString(j.Query)
	if n == 0 {
		return fmt.Errorf("field query: required, 1-%d characters", MaxQueryChars)
	}
	if n > MaxQueryChars {
		return fmt.Errorf("field query: %d characters, the limit is %d", n, MaxQueryChars)
	}
	if j.Task == "" {
		j.Task = engine.TaskDetect
	}
	if !j.Task.Valid() {
		return fmt.Errorf("field task: %q is not one of %v", j.Task, engine.Tasks)
	}
	if j.OverlayFormat != "" && !j.OverlayFormat.Valid() {
		return fmt.Errorf("field overlay_format: %q is not one of %v", j.OverlayFormat, overlay.Formats)
	}
	if j.GenerationMode != "" && !j.GenerationMode.Valid() {
		// Its own code rather than invalid_job: the job is well formed, but asks for a
		// mode this worker does not decode in.
		return engine.InputErrorf(engine.CodeBadGeneration, "field generation_mode: %q is not one of %v",
			j.GenerationMode, engine.GenerationModes)
	}
	if j.MaxNewTokens < 0 {
		return fmt.Errorf("field max_new_tokens: %d is negative", j.MaxNewTokens)
	}
	if j.Batch == "" {
		j.Batch = DefaultBatch
	}
	if !ValidToken(j.Batch) {
		return fmt.Errorf("field batch: %q must be 1-128 characters of [A-Za-z0-9_-]", j.Batch)
	}
	if len(j.Metadata) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(j.Metadata, &obj); err != nil || obj == nil {
			return fmt.Errorf("field metadata: must be a JSON object")
		}
	}
	return nil
}
