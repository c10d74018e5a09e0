package httpcompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/strictjson"
)

// predictRequest is the /predict body after it has been checked against the request model
// (pydantic's PredictRequest in the Python server). Unknown fields are ignored, as pydantic
// does by default; a name given twice is refused (Python keeps the last).
type predictRequest struct {
	Image         string      // base64; required unless ImageBytes or ImageURL is given
	ImageBytes    []byte      // a multipart/form-data upload: the image file itself
	ImageURL      string      // extension: an image to fetch through the storage layer
	Query         string      // required
	MaxNewTokens  *int64      // nil: the engine's default
	ReturnOverlay bool        // default false
	Task          engine.Task // extension; "" means detect
	// GenerationMode is an extension: "" means the worker's LA_GENERATION_MODE.
	GenerationMode engine.GenerationMode
}

// parsePredictRequest reads body the way FastAPI and pydantic (lax mode) do, and reports what
// does not fit as FastAPI's 422 entries.
func parsePredictRequest(body []byte) (predictRequest, []fieldError) {
	var req predictRequest
	var fields map[string]json.RawMessage
	err := json.Unmarshal(body, &fields)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return req, []fieldError{{
			Type: "json_invalid", Loc: []any{"body", syntax.Offset}, Msg: "JSON decode error",
			Input: json.RawMessage(`{}`), Ctx: map[string]any{"error": err.Error()},
		}}
	case err != nil || fields == nil: // valid JSON, but not an object (or null)
		return req, []fieldError{{
			Type: "model_attributes_type", Loc: []any{"body"},
			Msg:   "Input should be a valid dictionary or object to extract fields from",
			Input: shortInput(bytes.TrimSpace(body)),
		}}
	}
	// Python's json keeps the last of a name given twice; this server refuses the body, as
	// the worker refuses such a job, so that a proxy that reads the first sees what runs.
	if dup := strictjson.FirstDuplicate(body); dup != nil {
		return req, []fieldError{{
			Type: "json_invalid", Loc: []any{"body", dup.Offset}, Msg: "JSON decode error",
			Input: json.RawMessage(`{}`), Ctx: map[string]any{"error": dup.Error()},
		}}
	}

	var errs []fieldError
	req.ImageURL, _ = stringField(fields, "image_url", false, &errs)
	hasURL := req.ImageURL != ""
	var hasImage bool
	req.Image, hasImage = stringField(fields, "image", !hasURL, &errs)
	if hasURL && hasImage {
		errs = append(errs, bothImagesError())
	}
	req.Query, _ = stringField(fields, "query", true, &errs)
	task, _ := stringField(fields, "task", false, &errs)
	req.Task = engine.Task(task)
	mode, _ := stringField(fields, "generation_mode", false, &errs)
	req.GenerationMode = engine.GenerationMode(mode)
	if raw, present := fields["max_new_tokens"]; present && string(raw) != "null" {
		if n, fe := laxInt(raw); fe != nil {
			fe.Loc = []any{"body", "max_new_tokens"}
			errs = append(errs, *fe)
		} else {
			req.MaxNewTokens = &n
		}
	}
	if raw, present := fields["return_overlay"]; present {
		if b, fe := laxBool(raw); fe != nil {
			fe.Loc = []any{"body", "return_overlay"}
			errs = append(errs, *fe)
		} else {
			req.ReturnOverlay = b
		}
	}
	return req, errs
}

// bothImagesError is the 422 entry for a request that gives the image twice: inline and
// by URL.
func bothImagesError() fieldError {
	return fieldError{
		Type: "value_error", Loc: []any{"body"},
		Msg: "Value error, give the image once: either image (or an uploaded file) or image_url, not both",
	}
}

// stringField reads a str field. pydantic does not turn numbers into strings, and null is
// only allowed for an optional field.
func stringField(fields map[string]json.RawMessage, name string, required bool, errs *[]fieldError) (string, bool) {
	raw, present := fields[name]
	if !present || (!required && string(raw) == "null") {
		if required {
			*errs = append(*errs, fieldError{Type: "missing", Loc: []any{"body", name}, Msg: "Field required"})
		}
		return "", false
	}
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		// No escapes (the usual base64 image): the JSON scanner has already checked the
		// string, so its bytes are the value; this saves a second pass over megabytes.
		return string(raw[1 : len(raw)-1]), true
	}
	var v string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		*errs = append(*errs, fieldError{
			Type: "string_type", Loc: []any{"body", name}, Msg: "Input should be a valid string", Input: shortInput(raw),
		})
		return "", false
	}
	return v, true
}

// laxInt accepts what pydantic's lax mode turns into an int: an integer, a float without a
// fraction, or a string holding an integer. Values beyond int64 saturate (they are out of
// range for every budget anyway).
func laxInt(raw json.RawMessage) (int64, *fieldError) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				return n, nil
			}
		}
		return 0, &fieldError{Type: "int_parsing", Msg: "Input should be a valid integer, unable to parse string as an integer", Input: shortInput(raw)}
	}
	var num json.Number
	if json.Unmarshal(raw, &num) != nil {
		return 0, &fieldError{Type: "int_type", Msg: "Input should be a valid integer", Input: shortInput(raw)}
	}
	if n, err := num.Int64(); err == nil {
		return n, nil
	}
	f, err := num.Float64()
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, &fieldError{Type: "int_type", Msg: "Input should be a valid integer", Input: shortInput(raw)}
	}
	if f != math.Trunc(f) {
		return 0, &fieldError{Type: "int_from_float", Msg: "Input should be a valid integer, got a number with a fractional part", Input: shortInput(raw)}
	}
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64, nil
	case f <= math.MinInt64:
		return math.MinInt64, nil
	}
	return int64(f), nil
}

// laxBool accepts what pydantic's lax mode turns into a bool: true/false, 0/1, and the
// strings it knows ("true", "yes", "on", "1", ... in any case).
func laxBool(raw json.RawMessage) (bool, *fieldError) {
	switch string(raw) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "1", "on", "t", "true", "y", "yes":
			return true, nil
		case "0", "off", "f", "false", "n", "no":
			return false, nil
		}
		return false, &fieldError{Type: "bool_parsing", Msg: "Input should be a valid boolean, unable to interpret input", Input: shortInput(raw)}
	}
	return false, &fieldError{Type: "bool_type", Msg: "Input should be a valid boolean", Input: shortInput(raw)}
}

// shortInput echoes a rejected value back, as FastAPI does, unless it is too long to be
// useful in an error (a whole image, say).
func shortInput(raw []byte) json.RawMessage {
	if len(raw) == 0 || len(raw) > 200 {
		return nil
	}
	return json.RawMessage(raw)
}

// decodeImage turns the image field into bytes. Like Python's base64.b64decode it ignores
// whitespace and line breaks; it also accepts missing padding and a data: URL prefix.
func decodeImage(s string) ([]byte, error) {
	if strings.HasPrefix(s, "data:") {
		if i := strings.Index(s, ";base64,"); i >= 0 {
			s = s[i+len(";base64,"):]
		}
	}
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
			return -1
		}
		return r
	}, s)
	if s == "" {
		return nil, errors.New("image is empty")
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, fmt.Errorf("image is not valid base64: %w", err)
	}
	return b, nil
}
