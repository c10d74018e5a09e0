// Package jsonschema validates JSON documents against the subset of JSON Schema (draft
// 2020-12) that the repository's schema files use: the job and result schemas in
// jobs/schema. It exists so that those files are checked against real jobs and results in
// the tests without a dependency on a general validator.
//
// A schema is parsed strictly: a keyword outside the subset is an error rather than being
// ignored, because an ignored keyword would make the schema promise a check that nothing
// performs. The subset:
//
//   - annotations: $schema, $id, $comment, title, description, examples, default
//   - $defs and $ref to "#/$defs/<name>" (local references only)
//   - type (one name or a list), enum
//   - objects: properties, required, additionalProperties (a schema or a boolean)
//   - arrays: items, minItems, maxItems
//   - strings: minLength, maxLength (in characters, as the standard counts them), pattern
//     (Go's RE2 syntax, which agrees with ECMA 262 on the plain patterns the files use),
//     format "date-time" (RFC 3339, exactly as ajv-formats reads it: strictjson.ParseDateTime)
//   - numbers: minimum, maximum
//   - boolean schemas (true accepts anything, false nothing)
//
// A document must be I-JSON (RFC 7493) as the wire contract requires: a member name given
// twice in one object is an error, which general validators do not check (they see only
// the last of the two).
package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/locateanything/detect/internal/strictjson"
)

// Schema is one schema object of the supported subset. Its fields are the keywords; a
// boolean schema (true or false) sets Bool.
type Schema struct {
	Schema      string            `json:"$schema,omitempty"`
	ID          string            `json:"$id,omitempty"`
	Comment     string            `json:"$comment,omitempty"`
	Title       string            `json:"title,omitempty"`
	Description string            `json:"description,omitempty"`
	Examples    []json.RawMessage `json:"examples,omitempty"`
	Default     json.RawMessage   `json:"default,omitempty"`

	Defs map[string]*Schema `json:"$defs,omitempty"`
	Ref  string             `json:"$ref,omitempty"`

	Type Types `json:"type,omitempty"`
	Enum []any `json:"enum,omitempty"`

	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *Schema            `json:"additionalProperties,omitempty"`

	Items    *Schema `json:"items,omitempty"`
	MinItems *int    `json:"minItems,omitempty"`
	MaxItems *int    `json:"maxItems,omitempty"`

	MinLength *int   `json:"minLength,omitempty"`
	MaxLength *int   `json:"maxLength,omitempty"`
	Pattern   string `json:"pattern,omitempty"`
	Format    string `json:"format,omitempty"`

	Minimum *float64 `json:"minimum,omitempty"`
	Maximum *float64 `json:"maximum,omitempty"`

	// Bool is set for a boolean schema: *Bool true accepts every value, false none.
	Bool *bool `json:"-"`

	pattern *regexp.Regexp
}

// Types is the type keyword: one type name or several.
type Types []string

// UnmarshalJSON reads "string" or ["string", "null"].
func (t *Types) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*t = Types{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return fmt.Errorf("type must be a type name or a list of them: %s", data)
	}
	*t = many
	return nil
}

// Has reports whether name is among the types.
func (t Types) Has(name string) bool { return slices.Contains(t, name) }

// typeNames are the seven types of JSON Schema.
var typeNames = []string{"null", "boolean", "object", "array", "number", "integer", "string"}

// UnmarshalJSON reads a schema object, refusing keywords outside the subset, or a
// boolean schema.
func (s *Schema) UnmarshalJSON(data []byte) error {
	switch string(bytes.TrimSpace(data)) {
	case "true", "false":
		b := string(bytes.TrimSpace(data)) == "true"
		*s = Schema{Bool: &b}
		return nil
	}
	type plain Schema // the same fields without this method
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	*s = Schema(p)
	return nil
}

// Parse reads a schema document and checks it: keywords of the subset only, known type
// names and formats, patterns that compile, references that resolve.
func Parse(data []byte) (*Schema, error) {
	var s Schema
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	if err := s.prepare(&s, ""); err != nil {
		return nil, err
	}
	return &s, nil
}

// prepare checks s, found at path in root, and compiles its pattern.
func (s *Schema) prepare(root *Schema, path string) error {
	if s.Bool != nil {
		return nil
	}
	for _, name := range s.Type {
		if !slices.Contains(typeNames, name) {
			return fmt.Errorf("%s: unknown type %q", where(path), name)
		}
	}
	if s.Format != "" && s.Format != "date-time" {
		return fmt.Errorf("%s: format %q is not supported (only date-time)", where(path), s.Format)
	}
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return fmt.Errorf("%s: pattern: %w", where(path), err)
		}
		s.pattern = re
	}
	if s.Ref != "" {
		if _, err := root.lookup(s.Ref); err != nil {
			return fmt.Errorf("%s: %w", where(path), err)
		}
		if root.Resolve(s) == nil {
			return fmt.Errorf("%s: $ref %q leads round in a circle", where(path), s.Ref)
		}
	}
	for _, name := range s.Required {
		if s.Properties != nil && s.Properties[name] == nil {
			return fmt.Errorf("%s: required property %q is not among the properties", where(path), name)
		}
	}
	children := map[string]*Schema{"/items": s.Items, "/additionalProperties": s.AdditionalProperties}
	for name, d := range s.Defs {
		children["/$defs/"+name] = d
	}
	for name, p := range s.Properties {
		children["/properties/"+name] = p
	}
	for sub, c := range children {
		if c == nil {
			continue
		}
		if err := c.prepare(root, path+sub); err != nil {
			return err
		}
	}
	return nil
}

// lookup resolves a local reference, "#/$defs/<name>".
func (s *Schema) lookup(ref string) (*Schema, error) {
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok || s.Defs[name] == nil {
		return nil, fmt.Errorf("$ref %q does not name one of this document's $defs", ref)
	}
	return s.Defs[name], nil
}

// Resolve follows n's $ref within the document s (the root), if it has one, and returns
// the schema that applies. Parse has checked that every reference resolves; Resolve
// returns nil for a chain of references that never ends.
func (s *Schema) Resolve(n *Schema) *Schema {
	for range len(s.Defs) + 1 {
		if n == nil || n.Ref == "" {
			return n
		}
		next, err := s.lookup(n.Ref)
		if err != nil {
			return nil
		}
		n = next
	}
	return nil
}

// Error is a failed validation: every place where the document breaks the schema.
type Error struct {
	Problems []string // "<JSON pointer>: <what is wrong>", in document order
}

func (e *Error) Error() string { return strings.Join(e.Problems, "; ") }

// Validate checks the JSON document data against s. It returns nil, an *Error listing
// every problem, or an error saying that data is not one JSON value.
func (s *Schema) Validate(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("not JSON: trailing data after the value")
	}
	if dup := strictjson.FirstDuplicate(data); dup != nil {
		return fmt.Errorf("not I-JSON: %w", dup)
	}
	return s.ValidateValue(v)
}

// ValidateValue checks a decoded value (numbers as json.Number or float64, objects as
// map[string]any, arrays as []any) against s.
func (s *Schema) ValidateValue(v any) error {
	var e Error
	s.check(s, "", v, &e)
	if len(e.Problems) > 0 {
		return &e
	}
	return nil
}

// where names a location for a message: the JSON pointer, or "(root)".
func where(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}

// check validates v, found at path, against s within the document root.
func (s *Schema) check(root *Schema, path string, v any, e *Error) {
	fail := func(format string, args ...any) {
		e.Problems = append(e.Problems, where(path)+": "+fmt.Sprintf(format, args...))
	}
	if s.Bool != nil {
		if !*s.Bool {
			fail("no value is allowed here")
		}
		return
	}
	if s.Ref != "" {
		// Keywords beside $ref apply as well (2020-12), so the checks below go on.
		root.Resolve(s).check(root, path, v, e)
	}
	kind := kindOf(v)
	if len(s.Type) > 0 && !s.Type.Has(kind) && !(kind == "integer" && s.Type.Has("number")) {
		fail("%s, want %s", kind, strings.Join(s.Type, " or "))
		return
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(a any) bool { return equal(a, v) }) {
		fail("%s is not one of %s", show(v), show(s.Enum))
	}
	switch x := v.(type) {
	case string:
		s.checkString(x, fail)
	case json.Number, float64:
		s.checkNumber(toFloat(x), fail)
	case []any:
		if s.MinItems != nil && len(x) < *s.MinItems {
			fail("%d items, want at least %d", len(x), *s.MinItems)
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			fail("%d items, want at most %d", len(x), *s.MaxItems)
		}
		if s.Items != nil {
			for i, item := range x {
				s.Items.check(root, path+"/"+strconv.Itoa(i), item, e)
			}
		}
	case map[string]any:
		for _, name := range s.Required {
			if _, ok := x[name]; !ok {
				fail("required property %q is missing", name)
			}
		}
		names := make([]string, 0, len(x))
		for name := range x {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			sub := path + "/" + escapePointer(name)
			if p := s.Properties[name]; p != nil {
				p.check(root, sub, x[name], e)
			} else if s.AdditionalProperties != nil {
				if b := s.AdditionalProperties.Bool; b != nil && !*b {
					fail("property %q is not allowed", name)
				} else {
					s.AdditionalProperties.check(root, sub, x[name], e)
				}
			}
		}
	}
}

func (s *Schema) checkString(str string, fail func(string, ...any)) {
	chars := utf8.RuneCountInString(str)
	if s.MinLength != nil && chars < *s.MinLength {
		fail("%d characters, want at least %d", chars, *s.MinLength)
	}
	if s.MaxLength != nil && chars > *s.MaxLength {
		fail("%d characters, want at most %d", chars, *s.MaxLength)
	}
	if s.pattern != nil && !s.pattern.MatchString(str) {
		fail("%s does not match %s", show(str), s.Pattern)
	}
	if s.Format == "date-time" {
		if _, err := strictjson.ParseDateTime(str); err != nil {
			fail("%s is not an RFC 3339 date-time", show(str))
		}
	}
}

func (s *Schema) checkNumber(f float64, fail func(string, ...any)) {
	if s.Minimum != nil && f < *s.Minimum {
		fail("%v is below the minimum %v", f, *s.Minimum)
	}
	if s.Maximum != nil && f > *s.Maximum {
		fail("%v is above the maximum %v", f, *s.Maximum)
	}
}

// kindOf is the JSON Schema type of a decoded value; a number with no fraction is an
// "integer" (which every "number" schema accepts too), as the standard defines it.
func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number, float64:
		if strictjson.IsInteger(toFloat(x)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case float64:
		return x
	}
	return math.NaN()
}

// equal compares two decoded JSON values (enum members are decoded without UseNumber,
// documents with it).
func equal(a, b any) bool {
	if ka, kb := kindOf(a), kindOf(b); ka != kb {
		return false
	}
	switch x := a.(type) {
	case json.Number, float64:
		return toFloat(x) == toFloat(b)
	case []any:
		y := b.([]any)
		return len(x) == len(y) && equalLists(x, y)
	case map[string]any:
		y := b.(map[string]any)
		if len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	}
	return a == b
}

func equalLists(x, y []any) bool {
	for i := range x {
		if !equal(x[i], y[i]) {
			return false
		}
	}
	return true
}

// escapePointer escapes a property name for a JSON pointer (RFC 6901).
func escapePointer(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

// show quotes a value for a message, shortened.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}
