// Package strictjson reads JSON the way the wire contract promises to: a document is one
// object whose member names are spelled exactly and appear once, at every depth (I-JSON,
// RFC 7493), numbers are read as JSON Schema reads them, and a date-time is what the
// schema's "date-time" format accepts. Package jobs decodes job messages with it, the
// /predict server refuses duplicate names with it, and internal/jsonschema validates with
// the same rules, so that the schema files and the code cannot disagree.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// TopLevel is the member of the document's object that holds the duplicate: the
// duplicate name itself when it sits in the document's own object.
func (e *DuplicateError) TopLevel() string {
	if e.Pointer == "" {
		return e.Name
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(e.Pointer, "/"), "/")
	return strings.ReplaceAll(strings.ReplaceAll(first, "~1", "/"), "~0", "~")
}

// Object reads data as one JSON object and returns its members by their exact names.
// It fails with a *json.SyntaxError for what is not JSON (trailing data included),
// ErrNotObject for another kind of value (null included), and a *DuplicateError when a
// name appears twice in any object of the document.
func Object(data []byte) (map[string]json.RawMessage, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, err
		}
		return nil, ErrNotObject
	}
	if members == nil {
		return nil, ErrNotObject
	}
	if dup := FirstDuplicate(data); dup != nil {
		return nil, dup
	}
	return members, nil
}

// frame is one open object or array while FirstDuplicate walks a document.
type frame struct {
	object bool
	names  map[string]struct{} // the names seen so far in an object
	name   string              // an object's member being read
	index  int                 // an array's element being read
}

// FirstDuplicate returns the first member name that appears twice in one object of data,
// or nil when there is none. data must be valid JSON (json.Valid); the walk is one pass,
// linear in len(data), and does not recurse however deep the nesting.
func FirstDuplicate(data []byte) *DuplicateError {
	var stack []frame
	wantName := false
	for i := 0; i < len(data); {
		switch data[i] {
		case '{':
			stack = append(stack, frame{object: true})
			wantName = true
			i++
		case '[':
			stack = append(stack, frame{})
			i++
		case '}', ']':
			stack = stack[:len(stack)-1]
			wantName = false
			i++
		case ',':
			if top := &stack[len(stack)-1]; top.object {
				wantName = true
			} else {
				top.index++
			}
			i++
		case '"':
			end := stringEnd(data, i)
			if wantName {
				top := &stack[len(stack)-1]
				name := unquote(data[i:end])
				if _, seen := top.names[name]; seen {
					return &DuplicateError{Pointer: pointer(stack[:len(stack)-1]), Name: name, Offset: i}
				}
				if top.names == nil {
					top.names = map[string]struct{}{}
				}
				top.names[name] = struct{}{}
				top.name = name
				wantName = false
			}
			i = end
		default: // ':', white space, numbers, true, false, null
			i++
		}
	}
	return nil
}

// stringEnd is the offset just past the string that starts with the quote at data[start].
// It jumps from quote to quote (bytes.IndexByte is fast on the megabytes of a base64
// image) and skips a quote that an odd number of backslashes escapes.
func stringEnd(data []byte, start int) int {
	for i := start + 1; i < len(data); {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			break
		}
		i += q
		slashes := 0
		for k := i - 1; k > start && data[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return i + 1
		}
		i++
	}
	return len(data)
}

// unquote is the value of a JSON string literal, escapes undone, invalid UTF-8 replaced as
// encoding/json replaces it (so two names that decode alike count as one).
func unquote(lit []byte) string {
	plain := true
	for _, c := range lit {
		if c == '\\' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return string(lit)
	}
	return s
}

// pointer is the JSON pointer to the innermost of the open frames.
func pointer(open []frame) string {
	var b strings.Builder
	for _, f := range open {
		b.WriteByte('/')
		if f.object {
			b.WriteString(strings.ReplaceAll(strings.ReplaceAll(f.name, "~", "~0"), "/", "~1"))
		} else {
			b.WriteString(strconv.Itoa(f.index))
		}
	}
	return b.String()
}
