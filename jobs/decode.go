package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/strictjson"
)

// jobFieldOrder is the job's JSON fields in the order the schema lists them; the first
// field at fault in this order is the one an error names.
var jobFieldOrder = []string{
	"v", "id", "image", "query", "task", "max_new_tokens", "generation_mode",
	"overlay", "overlay_format", "output", "batch", "deadline", "metadata",
}

// decodeJobFields reads a job message exactly as jobs/schema/job.schema.json describes it
// (docs/wire-contract.md, "Decoding"): one JSON object; member names spelled exactly as the
// schema spells them, each at most once, at any depth (metadata included); no member the
// schema does not list; no null; every value of the type the schema names, integers as
// JSON Schema reads them (48.0 and 4.8e1 are 48), a deadline in the schema's date-time
// format. It leaves defaults and the rules on values to Validate.
//
// A message that is not one such object gives a nil job. A field at fault gives the job
// as far as it could be read (for an answer addressed by its id and batch), and an error
// that begins "field <name>: ".
func decodeJobFields(data []byte) (*Job, error) {
	members, err := strictjson.Object(data)
	if err != nil {
		var dup *strictjson.DuplicateError
		if errors.As(err, &dup) && slices.Contains(jobFieldOrder, dup.TopLevel()) {
			return nil, fmt.Errorf("field %s: %w", dup.TopLevel(), err)
		}
		return nil, fmt.Errorf("%w: %w", errDocument, err)
	}
	var j Job
	var first error
	for _, name := range jobFieldOrder {
		raw, ok := members[name]
		if !ok {
			continue
		}
		if err := j.setField(name, raw); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return &j, first
	}
	var unknown []string
	for name := range members {
		if !slices.Contains(jobFieldOrder, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return &j, fmt.Errorf("%w: unknown field %s (names are exact, in lower case)", errDocument, strconv.Quote(unknown[0]))
	}
	return &j, nil
}

// setField reads the member name of a job message into j.
func (j *Job) setField(name string, raw json.RawMessage) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("field %s: %s", name, fmt.Sprintf(format, args...))
	}
	if bytes.Equal(raw, []byte("null")) {
		return fail("null is not allowed; leave the field out for its default")
	}
	var err error
	switch name {
	case "v":
		var v float64
		if v, err = strictjson.Integer(raw); err == nil && v != SchemaVersion {
			return fail("schema version %s is not supported (this worker reads %d)", raw, SchemaVersion)
		}
		j.V = int(v)
	case "id":
		j.ID, err = readString(raw)
	case "image":
		j.Image, err = readString(raw)
	case "query":
		j.Query, err = readString(raw)
	case "task":
		var s string
		if s, err = readString(raw); err == nil && s == "" {
			return fail("\"\" is not one of %v; leave it out for detect", engine.Tasks)
		}
		j.Task = engine.Task(s)
	case "max_new_tokens":
		var n float64
		if n, err = strictjson.Integer(raw); err == nil {
			if err := engine.BudgetError(n, engine.MaxNewTokensLimit); err != nil {
				return fmt.Errorf("field %s: %w", name, err)
			}
			j.MaxNewTokens = int(n)
		}
	case "generation_mode":
		var s string
		if s, err = readString(raw); err == nil && s == "" {
			return engine.InputErrorf(engine.CodeBadGeneration, "field generation_mode: \"\" is not one of %v; leave it out for the worker's default",
				engine.GenerationModes)
		}
		j.GenerationMode = engine.GenerationMode(s)
	case "overlay":
		switch string(raw) {
		case "true", "false":
			j.Overlay = string(raw) == "true"
		default:
			err = errors.New("want true or false")
		}
	case "overlay_format":
		var s string
		if s, err = readString(raw); err == nil && s == "" {
			return fail("\"\" is not one of %v; leave it out for png", overlay.Formats)
		}
		j.OverlayFormat = overlay.Format(s)
	case "output":
		if j.Output, err = readString(raw); err == nil && j.Output == "" {
			return fail("empty; leave it out for the worker's results location")
		}
	case "batch":
		if j.Batch, err = readString(raw); err == nil && j.Batch == "" {
			return fail("empty; leave it out for %q", DefaultBatch)
		}
	case "deadline":
		var s string
		if s, err = readString(raw); err == nil {
			t, perr := strictjson.ParseDateTime(s)
			if perr != nil {
				return fail("%v", perr)
			}
			j.Deadline = &t
		}
	case "metadata":
		if raw[0] != '{' {
			return fail("must be a JSON object")
		}
		j.Metadata = raw
	}
	if err != nil {
		return fail("%v, got %s", err, excerpt(raw))
	}
	return nil
}

// readString reads a JSON string literal.
func readString(raw json.RawMessage) (string, error) {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", errors.New("want a string")
	}
	return s, nil
}

// excerpt is the start of a JSON value for a message.
func excerpt(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:37]) + "..."
	}
	return string(raw)
}
