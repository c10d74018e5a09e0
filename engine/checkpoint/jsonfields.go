package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// fieldReader reads typed fields out of one JSON object and collects every problem it
// meets, each naming the file and the dotted field path, so that a broken config is
// reported in one go rather than one field per attempt.
type fieldReader struct {
	file   string // "config.json"
	prefix string // "text_config." or ""
	obj    map[string]json.RawMessage
	errs   *[]error
}

func newFieldReader(file string, data []byte, errs *[]error) (*fieldReader, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", file, err)
	}
	if obj == nil {
		return nil, fmt.Errorf("%s: not a JSON object (null)", file)
	}
	return &fieldReader{file: file, obj: obj, errs: errs}, nil
}

func (r *fieldReader) fail(name, format string, args ...any) {
	*r.errs = append(*r.errs, fmt.Errorf("%s: %s%s: %s", r.file, r.prefix, name, fmt.Sprintf(format, args...)))
}

// raw returns the field's JSON text, or nil when the field is absent or null.
func (r *fieldReader) raw(name string) json.RawMessage {
	v, ok := r.obj[name]
	if !ok || string(bytes.TrimSpace(v)) == "null" {
		return nil
	}
	return v
}

func (r *fieldReader) has(name string) bool { return r.raw(name) != nil }

// object returns a reader for a nested object; a missing one is reported.
func (r *fieldReader) object(name string) *fieldReader {
	sub := &fieldReader{file: r.file, prefix: r.prefix + name + ".", obj: map[string]json.RawMessage{}, errs: r.errs}
	v := r.raw(name)
	if v == nil {
		r.fail(name, "missing")
		return sub
	}
	if err := json.Unmarshal(v, &sub.obj); err != nil || sub.obj == nil {
		r.fail(name, "want an object, got %s", clip(v))
		sub.obj = map[string]json.RawMessage{}
	}
	return sub
}

// requiredInt reads an integer field that must be present.
func (r *fieldReader) requiredInt(name string) int {
	if !r.has(name) {
		r.fail(name, "missing")
		return 0
	}
	return r.optionalInt(name, 0)
}

// optionalInt reads an integer field, or returns def when it is absent or null. A list of
// integers (as Hugging Face allows for eos_token_id) yields its first element.
func (r *fieldReader) optionalInt(name string, def int) int {
	v := r.raw(name)
	if v == nil {
		return def
	}
	var list []json.Number
	if json.Unmarshal(v, &list) == nil {
		if len(list) == 0 {
			r.fail(name, "empty list")
			return def
		}
		v = json.RawMessage(list[0])
	}
	n, err := parseInt(v)
	if err != nil {
		r.fail(name, "want an integer, got %s", clip(v))
		return def
	}
	return n
}

// requiredFloat reads a number field that must be present.
func (r *fieldReader) requiredFloat(name string) float64 {
	if !r.has(name) {
		r.fail(name, "missing")
		return 0
	}
	return r.optionalFloat(name, 0)
}

// optionalFloat reads a number field, or returns def when it is absent or null.
func (r *fieldReader) optionalFloat(name string, def float64) float64 {
	v := r.raw(name)
	if v == nil {
		return def
	}
	n, err := parseNumber(v)
	if err != nil {
		r.fail(name, "want a number, got %s", clip(v))
		return def
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		r.fail(name, "want a finite number, got %s", clip(v))
		return def
	}
	return f
}

// optionalBool reads a boolean field, or returns def when it is absent or null.
func (r *fieldReader) optionalBool(name string, def bool) bool {
	v := r.raw(name)
	if v == nil {
		return def
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		r.fail(name, "want true or false, got %s", clip(v))
		return def
	}
	return b
}

// squareKernel reads a size given either as one integer or as a [k, k] pair (MoonViT
// writes merge_kernel_size as a pair); a non-square pair is reported.
func (r *fieldReader) squareKernel(name string) int {
	v := r.raw(name)
	if v == nil {
		r.fail(name, "missing")
		return 0
	}
	var pair []json.Number
	if json.Unmarshal(v, &pair) == nil {
		if len(pair) != 2 || pair[0] != pair[1] {
			r.fail(name, "want an integer or a square pair [k, k], got %s", clip(v))
			return 0
		}
		v = json.RawMessage(pair[0])
	}
	n, err := parseInt(v)
	if err != nil {
		r.fail(name, "want an integer or a square pair [k, k], got %s", clip(v))
		return 0
	}
	return n
}

// triple reads a list of exactly three numbers (per-channel mean or std).
func (r *fieldReader) triple(name string) [3]float32 {
	var out [3]float32
	v := r.raw(name)
	if v == nil {
		r.fail(name, "missing")
		return out
	}
	var list []float64
	if err := json.Unmarshal(v, &list); err != nil || len(list) != 3 {
		r.fail(name, "want a list of 3 numbers, got %s", clip(v))
		return out
	}
	for i, f := range list {
		out[i] = float32(f)
	}
	return out
}

func parseInt(v json.RawMessage) (int, error) {
	n, err := parseNumber(v)
	if err != nil {
		return 0, err
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		// Accept an integral float such as 2.0; refuse 2.5.
		f, ferr := n.Float64()
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
			return 0, errors.New("not an integer")
		}
		return int(f), nil
	}
	if i > math.MaxInt32 || i < math.MinInt32 {
		return 0, errors.New("out of range")
	}
	return int(i), nil
}

// parseNumber reads a bare JSON number. (Decoding into json.Number alone would also
// accept a quoted "36".)
func parseNumber(v json.RawMessage) (json.Number, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] == '"' {
		return "", errors.New("not a number")
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return "", err
	}
	return n, nil
}

// clip shortens a JSON value for an error message.
func clip(v json.RawMessage) string {
	s := string(bytes.TrimSpace(v))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}
