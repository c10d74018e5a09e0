package jobs

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/jsonschema"
)

// The JSON Schema files of the wire contract (docs/wire-contract.md) that producers in
// any language validate against. The tests here keep them in step with the Go types
// (TestSchemaFilesMatchTheGoTypes), with DecodeJob (TestJobSchemaAgreesWithDecodeJob) and
// with the results the Runner writes (every result the Runner tests read is checked).
const (
	jobSchemaFile    = "schema/job.schema.json"
	resultSchemaFile = "schema/result.schema.json"
)

func loadSchema(t testing.TB, file string) *jsonschema.Schema {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jsonschema.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return s
}

// checkResultSchema fails the test when data, a result as a worker published or stored
// it, does not validate against the result schema.
func checkResultSchema(t testing.TB, data []byte) {
	t.Helper()
	if err := loadSchema(t, resultSchemaFile).Validate(data); err != nil {
		t.Errorf("result does not match %s: %v\n%s", resultSchemaFile, err, data)
	}
}

// direction says how a type crosses the wire, which decides what the schema must say
// beyond the types of the fields.
type direction int

const (
	// decoded: a producer writes it and DecodeJob reads it strictly, so every object
	// refuses other properties; which properties are required is what DecodeJob
	// refuses to go without (TestJobSchemaAgreesWithDecodeJob).
	decoded direction = iota
	// encoded: encoding/json writes it, so a property is required exactly when its
	// field has no omitempty, and a pointer field without omitempty may be null.
	encoded
)

// TestSchemaFilesMatchTheGoTypes walks jobs.Job and jobs.Result by reflection, as
// encoding/json sees them, and their schema files beside them: every JSON field must be a
// property with a compatible type and every property a field, all the way down; the
// value sets that Go defines (tasks, overlay formats, statuses, the id pattern, the query
// limit) must be the schema's. A field added to either side without the other fails here
// with the path and what to write.
func TestSchemaFilesMatchTheGoTypes(t *testing.T) {
	job := loadSchema(t, jobSchemaFile)
	compareType(t, job, job, jobSchemaFile+"#", reflect.TypeFor[Job](), decoded)
	result := loadSchema(t, resultSchemaFile)
	compareType(t, result, result, resultSchemaFile+"#", reflect.TypeFor[Result](), encoded)

	prop := func(root *jsonschema.Schema, name string) *jsonschema.Schema {
		if p := root.Resolve(root.Properties[name]); p != nil {
			return p
		}
		return &jsonschema.Schema{}
	}
	checkEnum(t, "job task", prop(job, "task"), engine.Tasks)
	checkEnum(t, "job overlay_format", prop(job, "overlay_format"), overlay.Formats)
	checkEnum(t, "job generation_mode", prop(job, "generation_mode"), engine.GenerationModes)
	checkEnum(t, "result generation_mode", prop(result, "generation_mode"), engine.GenerationModes)
	checkEnum(t, "result overlay_format", prop(result, "overlay_format"), overlay.Formats)
	checkEnum(t, "result status", prop(result, "status"), []Status{StatusSucceeded, StatusFailed, StatusCanceled, StatusExpired})
	checkEnum(t, "job v", prop(job, "v"), []int{SchemaVersion})
	for _, s := range []Status{StatusSucceeded, StatusFailed, StatusCanceled, StatusExpired} {
		if !s.Terminal() {
			t.Errorf("status %s is in the result schema but is not terminal", s)
		}
	}
	if m := prop(job, "max_new_tokens"); m.Minimum == nil || *m.Minimum != 1 || m.Maximum == nil || *m.Maximum != engine.MaxNewTokensLimit {
		t.Errorf("job max_new_tokens: range %v..%v, want 1..%d (engine.MaxNewTokensLimit)", m.Minimum, m.Maximum, engine.MaxNewTokensLimit)
	}
	if q := prop(job, "query"); q.MaxLength == nil || *q.MaxLength != MaxQueryChars || q.MinLength == nil || *q.MinLength != 1 {
		t.Errorf("job query: length limits %v..%v, want 1..%d (MaxQueryChars)", q.MinLength, q.MaxLength, MaxQueryChars)
	}
	for _, c := range []struct {
		root *jsonschema.Schema
		name string
	}{{job, "id"}, {job, "batch"}, {result, "batch"}} {
		if p := prop(c.root, c.name).Pattern; p != tokenRE.String() {
			t.Errorf("%s pattern %q, want ValidToken's %q", c.name, p, tokenRE.String())
		}
	}
	if p := prop(result, "id").Pattern; p != resultIDRE.String() {
		t.Errorf("result id pattern %q, want ValidResultID's %q", p, resultIDRE.String())
	}
}

// compareType checks that node (within the document root, found at path) describes what
// encoding/json writes for, and reads into, a value of type typ.
func compareType(t *testing.T, root, node *jsonschema.Schema, path string, typ reflect.Type, dir direction) {
	t.Helper()
	node = root.Resolve(node)
	if node == nil {
		t.Errorf("%s: no schema for Go type %s", path, typ)
		return
	}
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	wantType := func(name string) {
		t.Helper()
		got := slices.DeleteFunc(slices.Clone(node.Type), func(s string) bool { return s == "null" })
		if !slices.Equal(got, []string{name}) {
			t.Errorf("%s: schema type %v, want %q for Go type %s", path, node.Type, name, typ)
		}
	}
	switch {
	case typ == reflect.TypeFor[time.Time]():
		wantType("string")
		if node.Format != "date-time" {
			t.Errorf("%s: a time.Time needs \"format\": \"date-time\"", path)
		}
		return
	case typ == reflect.TypeFor[json.RawMessage]():
		// Any JSON value decodes into it; the schema says which are accepted (metadata:
		// an object, which Validate checks too).
		return
	}
	switch typ.Kind() {
	case reflect.String:
		wantType("string")
	case reflect.Bool:
		wantType("boolean")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		wantType("integer")
	case reflect.Float32, reflect.Float64:
		wantType("number")
	case reflect.Array:
		wantType("array")
		if node.MinItems == nil || node.MaxItems == nil || *node.MinItems != typ.Len() || *node.MaxItems != typ.Len() {
			t.Errorf("%s: a Go array %s needs \"minItems\" and \"maxItems\" %d", path, typ, typ.Len())
		}
		compareType(t, root, node.Items, path+"/items", typ.Elem(), dir)
	case reflect.Slice:
		wantType("array")
		compareType(t, root, node.Items, path+"/items", typ.Elem(), dir)
	case reflect.Map:
		wantType("object")
		if node.AdditionalProperties != nil {
			compareType(t, root, node.AdditionalProperties, path+"/additionalProperties", typ.Elem(), dir)
		}
	case reflect.Struct:
		wantType("object")
		compareObject(t, root, node, path, typ, dir)
	default:
		t.Errorf("%s: Go type %s has no JSON Schema counterpart here; extend compareType", path, typ)
	}
}

// compareObject checks the properties of node against the JSON fields of struct typ.
func compareObject(t *testing.T, root, node *jsonschema.Schema, path string, typ reflect.Type, dir direction) {
	t.Helper()
	fields := jsonFields(typ)
	for _, name := range slices.Sorted(maps.Keys(node.Properties)) {
		if _, ok := fields[name]; !ok {
			t.Errorf("%s: property %q is not a JSON field of Go type %s (remove it, or add the field)", path, name, typ)
		}
	}
	var required []string
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		f := fields[name]
		p := node.Properties[name]
		if p == nil {
			t.Errorf("%s: Go type %s has the JSON field %q (%s) but the schema has no such property: add it under %s/properties",
				path, typ, name, f.typ, path)
			continue
		}
		compareType(t, root, p, path+"/properties/"+name, f.typ, dir)
		if dir != encoded {
			continue
		}
		if !f.omitempty {
			required = append(required, name)
		}
		mayBeNull := f.typ.Kind() == reflect.Pointer && !f.omitempty
		if r := root.Resolve(p); r != nil && r.Type.Has("null") != mayBeNull {
			t.Errorf("%s/properties/%s: type %v; encoding/json writes null here: %v", path, name, r.Type, mayBeNull)
		}
	}
	switch dir {
	case encoded:
		for _, name := range required {
			if !slices.Contains(node.Required, name) {
				t.Errorf("%s: %q is always written (no omitempty), so it belongs in required", path, name)
			}
		}
		for _, name := range node.Required {
			if _, ok := fields[name]; ok && !slices.Contains(required, name) {
				t.Errorf("%s: %q is required but encoding/json leaves it out when empty (omitempty)", path, name)
			}
		}
	case decoded:
		if b := node.AdditionalProperties; b == nil || b.Bool == nil || *b.Bool {
			t.Errorf("%s: DecodeJob refuses unknown fields, so the schema needs \"additionalProperties\": false", path)
		}
	}
}

// jsonField is one field as encoding/json sees it.
type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists the JSON fields of struct typ by name, with the fields of embedded
// untagged structs promoted, as encoding/json does.
func jsonFields(typ reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, sub := range jsonFields(f.Type) {
				if _, shadowed := out[n]; !shadowed {
					out[n] = sub
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out[name] = jsonField{typ: f.Type, omitempty: omit}
	}
	return out
}

// checkEnum fails unless node's enum is exactly want, in any order.
func checkEnum[T any](t *testing.T, what string, node *jsonschema.Schema, want []T) {
	t.Helper()
	var got, exp []string
	for _, v := range node.Enum {
		got = append(got, fmt.Sprint(v))
	}
	for _, v := range want {
		exp = append(exp, fmt.Sprint(v))
	}
	slices.Sort(got)
	slices.Sort(exp)
	if !slices.Equal(got, exp) {
		t.Errorf("%s: schema enum %v, Go has %v", what, got, exp)
	}
}

// fullJob sets every property of the job schema to a valid value.
func fullJob() map[string]any {
	return map[string]any{
		"v": 1, "id": "cam04-000123", "image": "s3://frames/cam04/000123.jpg", "query": "person</c>car",
		"task": "ground", "max_new_tokens": 64, "generation_mode": "hybrid", "overlay": true, "overlay_format": "jpeg",
		"output": "s3://results/cam04/", "batch": "cam04-2026-12-02", "deadline": "2026-12-02T10:00:00Z",
		"metadata": map[string]any{"camera": "04"},
	}
}

// TestJobSchemaAgreesWithDecodeJob: a job the schema accepts is one the worker accepts,
// and the mistakes the worker refuses (wrong types, values outside their sets, unknown
// fields, a missing required field) the schema refuses too, so a producer that validates
// against the file never sees invalid_job.
func TestJobSchemaAgreesWithDecodeJob(t *testing.T) {
	schema := loadSchema(t, jobSchemaFile)
	agree := func(what string, doc []byte, valid bool) {
		t.Helper()
		_, decErr := DecodeJob(doc)
		schemaErr := schema.Validate(doc)
		if (decErr == nil) != valid || (schemaErr == nil) != valid {
			t.Errorf("%s: DecodeJob says %v, the schema %v; want both valid=%v\n%s", what, decErr, schemaErr, valid, doc)
		}
	}
	with := func(name string, value any) []byte {
		j := fullJob()
		j[name] = value
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	full := fullJob()
	if got, want := slices.Sorted(maps.Keys(full)), slices.Sorted(maps.Keys(schema.Properties)); !slices.Equal(got, want) {
		t.Fatalf("fullJob sets %v, the schema has %v: give every property a valid value in fullJob", got, want)
	}
	b, _ := json.Marshal(full)
	agree("every field", b, true)
	for name := range full {
		j := fullJob()
		delete(j, name)
		b, _ := json.Marshal(j)
		agree("without "+name, b, !slices.Contains(schema.Required, name))
	}

	long := strings.Repeat("x", 128)
	for _, c := range []struct {
		name  string
		value any
		valid bool
	}{
		{"v", 2, false}, {"v", "1", false},
		{"id", "", false}, {"id", "a.b", false}, {"id", "a b", false}, {"id", long + "x", false}, {"id", 5, false},
		{"id", long, true}, {"id", "A_b-9", true},
		{"image", "", false}, {"image", 5, false},
		{"query", "", false}, {"query", strings.Repeat("é", MaxQueryChars), true},
		{"query", strings.Repeat("é", MaxQueryChars+1), false}, {"query", []string{"a"}, false},
		{"task", "segment", false}, {"task", "point", true}, {"task", "detect", true},
		{"max_new_tokens", -1, false}, {"max_new_tokens", 1.5, false}, {"max_new_tokens", "8", false},
		{"max_new_tokens", 0, false}, {"max_new_tokens", 1, true}, {"max_new_tokens", 48.0, true},
		{"max_new_tokens", engine.MaxNewTokensLimit, true}, {"max_new_tokens", engine.MaxNewTokensLimit + 1, false},
		{"max_new_tokens", 1e20, false},
		{"generation_mode", "fast", false}, {"generation_mode", "AR", false}, {"generation_mode", 1, false},
		{"generation_mode", "ar", true}, {"generation_mode", "hybrid", true},
		{"overlay", "yes", false}, {"overlay", false, true},
		{"overlay_format", "webp", false}, {"overlay_format", "JPEG", false}, {"overlay_format", "png", true},
		{"output", 5, false},
		{"batch", "a/b", false}, {"batch", long + "x", false}, {"batch", "default", true},
		{"deadline", "tomorrow", false}, {"deadline", "2026-12-02", false}, {"deadline", 1700000000, false},
		{"deadline", "2026-12-02T10:00:00.123+01:00", true},
		{"metadata", []int{1}, false}, {"metadata", "camera", false}, {"metadata", 5, false}, {"metadata", nil, false},
		{"metadata", map[string]any{}, true}, {"metadata", map[string]any{"a": []any{1, nil}}, true},
		{"priority", 1, false},
	} {
		agree(fmt.Sprintf("%s=%v", c.name, c.value), with(c.name, c.value), c.valid)
	}
	for _, doc := range []string{`[]`, `"job"`, `{"id": "a", "image": "s3://b/k", "query": "q"} {}`} {
		agree("document "+doc, []byte(doc), false)
	}
}

// TestJobsGoWritesMatchTheSchema: jobs as Go producers (submit, the tests) encode them
// validate, the smallest and the fullest.
func TestJobsGoWritesMatchTheSchema(t *testing.T) {
	schema := loadSchema(t, jobSchemaFile)
	deadline := time.Date(2026, 12, 2, 10, 0, 0, 500, time.FixedZone("", 3600))
	for _, j := range []Job{
		{ID: "a", Image: "file:///x.png", Query: "q"},
		{V: SchemaVersion, ID: "cam04-000123", Image: "s3://frames/x.jpg", Query: "person</c>car", Task: engine.TaskPoint,
			MaxNewTokens: 32, GenerationMode: engine.GenerationHybrid, Overlay: true, OverlayFormat: overlay.JPEG, Output: "s3://results/", Batch: "b",
			Deadline: &deadline, Metadata: json.RawMessage(`{"camera": "04"}`)},
	} {
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(b); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
}
