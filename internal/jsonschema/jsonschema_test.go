package jsonschema

import (
	"errors"
	"strings"
	"testing"
)

// testSchema uses every keyword of the subset.
const testSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://example.com/t.schema.json",
  "title": "t", "description": "a test", "$comment": "c", "examples": [{"id": "a"}],
  "type": "object",
  "required": ["id", "box"],
  "additionalProperties": false,
  "properties": {
    "id": {"type": "string", "pattern": "^[a-z]{1,3}$"},
    "name": {"type": "string", "minLength": 1, "maxLength": 3},
    "v": {"type": "integer", "enum": [1, 2], "default": 1},
    "n": {"type": "number", "minimum": 0, "maximum": 1},
    "when": {"type": "string", "format": "date-time"},
    "url": {"type": ["string", "null"]},
    "box": {"$ref": "#/$defs/box"},
    "list": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    "meta": {"type": "object"},
    "open": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "never": false,
    "any": true
  },
  "$defs": {
    "box": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
    "item": {"type": "object", "required": ["k"], "properties": {"k": {"enum": ["a", "b"]}}}
  }
}`

func TestValidateAcceptsAndRefuses(t *testing.T) {
	s, err := Parse([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		doc  string
		want string // a fragment of the error; "" = valid
	}{
		{`{"id": "ab", "box": [1, 2.5]}`, ""},
		{`{"id": "ab", "box": [1, 2], "name": "héé", "v": 2, "n": 0.5, "when": "2026-12-02T10:00:00.5+01:00",
		   "url": null, "list": [{"k": "a", "x": 1}], "meta": {"a": [1]}, "open": {"x": true}, "any": [null]}`, ""},
		{`{"id": "ab", "box": [1, 2], "url": "s3://b/k"}`, ""},
		{`{"box": [1, 2]}`, `(root): required property "id" is missing`},
		{`{"id": "ab", "box": [1, 2], "extra": 1}`, `(root): property "extra" is not allowed`},
		{`{"id": "abcd", "box": [1, 2]}`, `/id: "abcd" does not match ^[a-z]{1,3}$`},
		{`{"id": 7, "box": [1, 2]}`, `/id: integer, want string`},
		{`{"id": "a", "box": [1, 2], "name": ""}`, `/name: 0 characters, want at least 1`},
		{`{"id": "a", "box": [1, 2], "name": "héél"}`, `/name: 4 characters, want at most 3`},
		{`{"id": "a", "box": [1, 2], "v": 3}`, `/v: 3 is not one of [1,2]`},
		{`{"id": "a", "box": [1, 2], "v": 1.5}`, `/v: number, want integer`},
		{`{"id": "a", "box": [1, 2], "v": 1.0}`, ``}, // 1.0 is an integer to JSON Schema
		{`{"id": "a", "box": [1, 2], "n": -0.1}`, `/n: -0.1 is below the minimum 0`},
		{`{"id": "a", "box": [1, 2], "n": 2}`, `/n: 2 is above the maximum 1`},
		{`{"id": "a", "box": [1, 2], "when": "2026-12-02 10:00"}`, `/when: "2026-12-02 10:00" is not an RFC 3339 date-time`},
		{`{"id": "a", "box": [1, 2], "url": false}`, `/url: boolean, want string or null`},
		{`{"id": "a", "box": [1]}`, `/box: 1 items, want at least 2`},
		{`{"id": "a", "box": [1, 2, 3]}`, `/box: 3 items, want at most 2`},
		{`{"id": "a", "box": [1, "2"]}`, `/box/1: string, want number`},
		{`{"id": "a", "box": [1, 2], "list": [{"k": "c"}]}`, `/list/0/k: "c" is not one of ["a","b"]`},
		{`{"id": "a", "box": [1, 2], "list": [{}]}`, `/list/0: required property "k" is missing`},
		{`{"id": "a", "box": [1, 2], "meta": []}`, `/meta: array, want object`},
		{`{"id": "a", "box": [1, 2], "open": {"a/b": 1}}`, `/open/a~1b: integer, want boolean`},
		{`{"id": "a", "box": [1, 2], "never": 1}`, `/never: no value is allowed here`},
		{`[]`, `(root): array, want object`},
		{`{"id": "a", "box": [1, 2]} {}`, `trailing data`},
		{`{"id": `, `not JSON`},
	} {
		err := s.Validate([]byte(tc.doc))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v; want valid", tc.doc, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want an error with %q", tc.doc, err, tc.want)
		}
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	s, err := Parse([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Validate([]byte(`{"id": "ABC", "box": ["x", 1], "v": 9}`))
	var ve *Error
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("got %v; want the three problems (id, box/0, v)", err)
	}
}

func TestParseRefusesWhatItCannotCheck(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type": "object", "oneOf": []}`, `unknown field "oneOf"`},
		{`{"properties": {"a": {"const": 1}}}`, `unknown field "const"`},
		{`{"type": "strin"}`, `(root): unknown type "strin"`},
		{`{"properties": {"a": {"format": "email"}}}`, `/properties/a: format "email" is not supported`},
		{`{"pattern": "("}`, `(root): pattern`},
		{`{"properties": {"a": {"$ref": "#/$defs/b"}}}`, `/properties/a: $ref "#/$defs/b" does not name`},
		{`{"$ref": "other.json"}`, `$ref "other.json" does not name`},
		{`{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}`, `leads round in a circle`},
		{`{"properties": {"a": {}}, "required": ["b"]}`, `required property "b" is not among the properties`},
	} {
		if _, err := Parse([]byte(tc.schema)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.schema, err, tc.want)
		}
	}
}
