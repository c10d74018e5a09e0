package strictjson

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFirstDuplicateFindsANameGivenTwiceAtAnyDepth(t *testing.T) {
	for doc, want := range map[string]string{
		`{"a":1,"a":2}`:                         `member "a" appears twice in the document`,
		`{"a":1,"\u0061":2}`:                    `member "a" appears twice in the document`,
		`{"m":{"x":[0,{"k":1,"k":2}]}}`:         `member "k" appears twice in /m/x/1`,
		`{"a/b~":{"k":"\"","k":1}}`:             `member "k" appears twice in /a~1b~0`,
		`[{"k":1},{"k":1},{"k":{"j":1,"j":1}}]`: `member "j" appears twice in /2/k`,
		`{"s":"{\"k\":1,\"k\":2}\\","s":1}`:     `member "s" appears twice in the document`,
	} {
		dup := FirstDuplicate([]byte(doc))
		if dup == nil || !strings.Contains(dup.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, dup, want)
		}
	}
	for _, doc := range []string{
		`{}`, `[]`, `"a"`, `{"a":{"a":{"a":1}}}`, `[{"k":1},{"k":2}]`, `{"k":"\"k\":1,\"k\":2"}`,
		`{"a":1,"A":2}`, `{"a\\":1,"a":2}`, `{"a":[1,2],"b":{}}`,
	} {
		if dup := FirstDuplicate([]byte(doc)); dup != nil {
			t.Errorf("%s: %v, want none", doc, dup)
		}
	}
	if _, err := Object([]byte(`{"m":{"k":1,"k":2}}`)); err == nil {
		t.Error("Object accepted a name given twice")
	} else if dup := (*DuplicateError)(nil); !errors.As(err, &dup) || dup.TopLevel() != "m" {
		t.Errorf("Object: %v, want a DuplicateError under m", err)
	}
	for _, doc := range []string{`[]`, `null`, `1`} {
		if _, err := Object([]byte(doc)); !errors.Is(err, ErrNotObject) {
			t.Errorf("%s: %v, want ErrNotObject", doc, err)
		}
	}
}

func TestIntegerIsJSONSchemas(t *testing.T) {
	for lit, want := range map[string]float64{"48": 48, "48.0": 48, "4.8e1": 48, "-0": 0, "1e20": 1e20, "1e-400": 0} {
		if got, err := Integer([]byte(lit)); err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", lit, got, err, want)
		}
	}
	for _, lit := range []string{"48.5", "1e400", `"48"`, "null", "true", ""} {
		if got, err := Integer([]byte(lit)); err == nil {
			t.Errorf("%s: %v, want an error", lit, got)
		}
	}
}

// TestParseDateTimeFollowsAjvFormats: the cases where RFC 3339 readers differ, decided as
// ajv-formats 3 decides them (its full date-time format).
func TestParseDateTimeFollowsAjvFormats(t *testing.T) {
	for s, want := range map[string]time.Time{
		"2099-12-02t10:00:00z":           time.Date(2099, 12, 2, 10, 0, 0, 0, time.UTC),
		"2099-12-02 10:00:00Z":           time.Date(2099, 12, 2, 10, 0, 0, 0, time.UTC),
		"2099-12-02\u300010:00:00Z":      time.Date(2099, 12, 2, 10, 0, 0, 0, time.UTC),
		"2098-12-31T23:59:60Z":           time.Date(2098, 12, 31, 23, 59, 59, 999999999, time.UTC),
		"2098-12-31T18:59:60.5-05:00":    time.Date(2098, 12, 31, 23, 59, 59, 999999999, time.UTC),
		"9999-12-31T24:59:60+01:00":      time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		"2099-12-02T24:59:30+01:00":      time.Date(2099, 12, 2, 23, 59, 30, 0, time.UTC), // ajv's leap arithmetic lets it by
		"2099-12-02T10:00:00+05":         time.Date(2099, 12, 2, 5, 0, 0, 0, time.UTC),
		"2099-12-02T10:00:00.000000001Z": time.Date(2099, 12, 2, 10, 0, 0, 1, time.UTC),
	} {
		got, err := ParseDateTime(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
		if _, err := got.MarshalJSON(); err != nil {
			t.Errorf("%q: %v does not encode: %v", s, got, err)
		}
	}
	for _, s := range []string{
		"2099-12-02T10:00:00", "2098-12-31T23:58:60Z", "2099-12-02T25:00:00Z", "2099-02-29T00:00:00Z",
		"2099-12-02T10:00:00+2400", "2099-12-02T10:00:00+05:", "2099-12-02T10:00:00+5", "2099-12-02t 10:00:00Z",
		"2099-12-02T10:00:00.Z", "99-12-02T10:00:00Z", "2099-12-02T10:00:00Zx",
	} {
		if got, err := ParseDateTime(s); err == nil {
			t.Errorf("%q: %v, want an error", s, got)
		}
	}
}
