package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// jobSeeds are job messages as they reach DecodeJob: the wire contract's example, what
// submit publishes, the poison messages of the runner tests, and some odd shapes.
var jobSeeds = []string{
	`{"id": "cam04-000123", "image": "s3://frames/cam04/000123.jpg", "query": "person</c>car",
 "overlay": true, "output": "s3://results/cam04/", "batch": "cam04-2026-12-02",
 "deadline": "2026-12-02T10:00:00Z", "metadata": {"camera": "04"}}`,
	`{"v":1,"id":"sha256-abc","image":"file:///data/frames/a.jpg","query":"dog","task":"ground","max_new_tokens":128,"metadata":{"cam":4}}`,
	`{"id":"j1","image":"s3://images/dog.jpg","query":"caf\u00e9 \ud83d\ude42","task":"point","deadline":"2026-12-02T10:00:00.123456789+05:30"}`,
	`{"id":"j2","image":"x","query":"q","deadline":null,"metadata":{"a":{"b":[1,2.5e3,"<&>",null,true]}}}`,
	`{"id": "bad-json", "image": `,
	`{"id":"unknown-field","image":"s3://images/dog.jpg","query":"dog","colour":"red"}`,
	`{"id":"a","image":"b","query":"c","deadline":"tomorrow"}`,
	`{"id":"a","image":"b","query":"c","deadline":0}`,
	`{"id":"a b","image":"b","query":"c"}`,
	`{"id":"a","image":"b","query":"c","metadata":[1]}`,
	`{"id":"a","image":"b","query":"c","v":2}`,
	`{"id":"a","image":"b","query":"c","max_new_tokens":-1}`,
	`{"id":"a","image":"b","query":"c","overlay":true,"overlay_format":"jpeg"}`,
	`{"id":"a","image":"b","query":"c","overlay":true,"overlay_format":"JPG"}`,
	`{"id":"a","image":"b","query":"c"} {"id":"d"}`,
	`[]`, `null`, `"job"`, ``,
	`{"id":"a","image":"b","query":"c","deadline":"9999-12-31T23:59:60Z","max_new_tokens":4.8e1}`,
	`{"id":"a","image":"b","query":"c","metadata":{"k":1,"k":2}}`,
}

// jobFields are the job's JSON field names, as its struct tags spell them.
var jobFields = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[Job]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = true
	}
	return m
}()

var fieldRE = regexp.MustCompile(`^field ([a-z_]+): `)

// FuzzDecodeJob: DecodeJob never panics; a job it accepts is valid, and encoding it gives
// a message that decodes to the same job (and encodes to the same bytes again); a job it
// refuses has an error that names the field at fault, unless the message is not a JSON
// object of the schema at all.
func FuzzDecodeJob(f *testing.F) {
	for _, s := range jobSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := DecodeJob(data)
		if err != nil {
			checkJobError(t, data, err)
			return
		}
		checkValidJob(t, data, j)
		enc, err := json.Marshal(j)
		if err != nil {
			t.Fatalf("accepted %.300q, but the job does not encode: %v", data, err)
		}
		j2, err := DecodeJob(enc)
		if err != nil {
			t.Fatalf("accepted %.300q, but its encoding %.300s is refused: %.300v", data, enc, err)
		}
		if !sameJob(j, j2) {
			t.Fatalf("%.300q decodes to %.300v, its encoding %.300s to %.300v", data, j, enc, j2)
		}
		if enc2, _ := json.Marshal(j2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %.300s, then %.300s", enc, enc2)
		}
	})
}

// checkValidJob: what DecodeJob accepts holds every rule of the schema, defaults filled.
func checkValidJob(t *testing.T, data []byte, j *Job) {
	t.Helper()
	if j == nil {
		t.Fatalf("%.300q: nil job and no error", data)
	}
	n := utf8.RuneCountInString(j.Query)
	switch {
	case j.V != 0 && j.V != SchemaVersion:
		t.Fatalf("%.300q: accepted schema version %d", data, j.V)
	case !ValidToken(j.ID) || !ValidToken(j.Batch):
		t.Fatalf("%.300q: accepted id %q batch %q", data, j.ID, j.Batch)
	case j.Image == "":
		t.Fatalf("%.300q: accepted without an image", data)
	case n < 1 || n > MaxQueryChars:
		t.Fatalf("%.300q: accepted a query of %d characters", data, n)
	case !j.Task.Valid():
		t.Fatalf("%.300q: accepted task %q", data, j.Task)
	case j.MaxNewTokens < 0:
		t.Fatalf("%.300q: accepted max_new_tokens %d", data, j.MaxNewTokens)
	case j.OverlayFormat != "" && !j.OverlayFormat.Valid():
		t.Fatalf("%.300q: accepted overlay_format %q", data, j.OverlayFormat)
	}
	if len(j.Metadata) > 0 {
		var obj map[string]any
		if json.Unmarshal(j.Metadata, &obj) != nil || obj == nil {
			t.Fatalf("%.300q: accepted metadata %.300s that is not an object", data, j.Metadata)
		}
	}
	again := *j
	if err := again.Validate(); err != nil || !reflect.DeepEqual(again, *j) {
		t.Fatalf("%.300q: validating the accepted job again: %v, %.300v", data, err, again)
	}
}

// checkJobError: a refusal names the field at fault ("field x: ..." or an unknown or
// mistyped field), or says that the message is not a JSON object of the schema.
func checkJobError(t *testing.T, data []byte, err error) {
	t.Helper()
	msg := err.Error()
	if m := fieldRE.FindStringSubmatch(msg); m != nil {
		if !jobFields[m[1]] {
			t.Fatalf("%.300q: error %.300q names %q, not a field of the job", data, msg, m[1])
		}
		return
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
	case errors.As(err, &typ):
		if typ.Field != "" && !jobFields[strings.SplitN(typ.Field, ".", 2)[0]] {
			t.Fatalf("%.300q: type error %.300q about %q, not a field of the job", data, msg, typ.Field)
		}
		if typ.Field == "" && bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
			t.Fatalf("%.300q: type error %.300q on an object names no field", data, msg)
		}
	case errors.Is(err, errDocument): // not an object, a name twice, an unknown name
	case strings.Contains(msg, "trailing data"):
	default:
		t.Fatalf("%.300q: error %.300q names no field", data, msg)
	}
}

// sameJob compares two decoded jobs: deadlines as instants (a +00:00 offset may come back
// as UTC) and metadata as JSON values (encoding compacts it and escapes <, > and &).
func sameJob(a, b *Job) bool {
	if (a.Deadline == nil) != (b.Deadline == nil) || a.Deadline != nil && !a.Deadline.Equal(*b.Deadline) {
		return false
	}
	var ma, mb any
	if (len(a.Metadata) == 0) != (len(b.Metadata) == 0) {
		return false
	}
	if len(a.Metadata) > 0 {
		if json.Unmarshal(a.Metadata, &ma) != nil || json.Unmarshal(b.Metadata, &mb) != nil || !reflect.DeepEqual(ma, mb) {
			return false
		}
	}
	ca, cb := *a, *b
	ca.Deadline, cb.Deadline, ca.Metadata, cb.Metadata = nil, nil, nil, nil
	return reflect.DeepEqual(ca, cb)
}

// TestDecodeJobOddInputsReturnPromptly: a megabyte of odd JSON are refused (or accepted) in
// time linear in their size, not in their nesting or in the length of a value.
func TestDecodeJobOddInputsReturnPromptly(t *testing.T) {
	const size = 1 << 20
	head := `{"id":"a","image":"b","query":"c","metadata":`
	cases := map[string]struct {
		data  []byte
		field string // "" for a JSON-level refusal, "-" for acceptance
	}{
		"deep nesting":       {[]byte(head + strings.Repeat(`{"a":[`, size/6)), ""},
		"only brackets":      {bytes.Repeat([]byte("["), size), ""},
		"long query":         {[]byte(`{"id":"a","image":"b","query":"` + strings.Repeat("é", size/2) + `"}`), "query"},
		"long id":            {[]byte(`{"id":"` + strings.Repeat("x", size) + `","image":"b","query":"c"}`), "id"},
		"wide metadata":      {[]byte(head + `{` + manyNames(size/10) + `"k":1}}`), "-"},
		"many escapes":       {[]byte(`{"id":"a","image":"` + strings.Repeat(`\u00e9`, size/6) + `","query":"c"}`), "-"},
		"bad deadline":       {[]byte(`{"id":"a","image":"b","query":"c","deadline":"` + strings.Repeat("9", size) + `"}`), "deadline"},
		"many unknown":       {[]byte(`{"id":"a",` + strings.Repeat(`"zz":0,`, size/7) + `"image":"b"}`), ""},
		"trailing garbage":   {[]byte(`{"id":"a","image":"b","query":"c"}` + strings.Repeat(" x", size/2)), ""},
		"numbers everywhere": {[]byte(`{"max_new_tokens":` + strings.Repeat("9", size) + `}`), ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			j, err := DecodeJob(c.data)
			// Linear work on a MiB takes milliseconds; this only catches the superlinear.
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
			switch {
			case c.field == "-" && err != nil:
				t.Fatalf("refused: %.200v", err)
			case c.field == "-":
				checkValidJob(t, nil, j)
			case err == nil:
				t.Fatal("accepted")
			case c.field != "" && !strings.HasPrefix(err.Error(), "field "+c.field+": "):
				t.Fatalf("error %.200q, want one about field %s", err, c.field)
			default:
				checkJobError(t, c.data[:64], err)
			}
		})
	}
}

// manyNames is n members of a JSON object, each with its own name, and a comma after each.
func manyNames(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `"k%d":0,`, i)
	}
	return b.String()
}

// TestDecodeJobErrorsNameTheField: each rule of the schema, broken alone, gives an error
// naming its field; a malformed deadline included (time's own error names none).
func TestDecodeJobErrorsNameTheField(t *testing.T) {
	for field, body := range map[string]string{
		"v":              `"v":2`,
		"id":             `"id":"a b"`,
		"image":          `"image":""`,
		"query":          `"query":""`,
		"task":           `"task":"segment"`,
		"max_new_tokens": `"max_new_tokens":-5`,
		"overlay_format": `"overlay_format":"gif"`,
		"batch":          `"batch":"a.b"`,
		"metadata":       `"metadata":[1]`,
		"deadline":       `"deadline":"2026-13-01T00:00:00Z"`,
	} {
		data := `{"id":"a","image":"b","query":"c",` + body + `}`
		_, err := DecodeJob([]byte(data))
		if err == nil || !strings.HasPrefix(err.Error(), "field "+field+": ") {
			t.Errorf("%s: error %.300v, want one starting with %q", data, err, "field "+field+": ")
		}
	}
	for _, data := range []string{`{"deadline":5}`, `{"id":"a","image":"b","query":"c","deadline":{}}`} {
		if _, err := DecodeJob([]byte(data)); err == nil || !strings.Contains(err.Error(), "field deadline: ") {
			t.Errorf("%s: error %.300v, want one naming field deadline", data, err)
		}
	}
}
