package httpcompat

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestParsePredictRequestValues(t *testing.T) {
	cases := []struct {
		body    string
		query   string
		budget  int64 // -1: absent
		overlay bool
	}{
		{`{"image":"eA==","query":"d\u006fg"}`, "dog", -1, false}, // escapes are unquoted
		{`{"image":"eA==","query":"caf\u00e9</c>car"}`, "café</c>car", -1, false},
		{`{"image":"eA==","query":"q","max_new_tokens":" 64 ","return_overlay":1}`, "q", 64, true},
		{`{"image":"eA==","query":"q","max_new_tokens":1e2,"return_overlay":"YES"}`, "q", 100, true},
		{`{"image":"eA==","query":"q","max_new_tokens":1e300}`, "q", math.MaxInt64, false},
		{`{"Image":"ignored","image":"eA==","QUERY":"ignored","query":"q"}`, "q", -1, false}, // keys are case-sensitive
	}
	for _, c := range cases {
		req, errs := parsePredictRequest([]byte(c.body))
		if errs != nil {
			t.Errorf("%s: %+v", c.body, errs)
			continue
		}
		budget := int64(-1)
		if req.MaxNewTokens != nil {
			budget = *req.MaxNewTokens
		}
		if req.Image != "eA==" || req.Query != c.query || budget != c.budget || req.ReturnOverlay != c.overlay {
			t.Errorf("%s: got %+v (budget %d)", c.body, req, budget)
		}
	}
}

// TestParsePredictRequestRefusesANameGivenTwice: Python's json keeps the last of a name
// given twice, so a proxy that reads the first would be shown another image or query than
// the one that runs (#23, defect 6); the body is refused as JSON that is not I-JSON.
func TestParsePredictRequestRefusesANameGivenTwice(t *testing.T) {
	for _, body := range []string{
		`{"image":"eA==","query":"x","query":"last wins"}`,
		`{"image":"eA==","\u0069mage":"eB==","query":"q"}`,
		`{"image":"eA==","query":"q","extra":{"a":1,"a":2}}`,
	} {
		_, errs := parsePredictRequest([]byte(body))
		if len(errs) != 1 || errs[0].Type != "json_invalid" || !strings.Contains(fmt.Sprint(errs[0].Ctx), "appears twice") {
			t.Errorf("%s: %+v, want one json_invalid entry about the name given twice", body, errs)
		}
	}
}

func TestParsePredictRequestInvalidUTF8IsReplaced(t *testing.T) {
	req, errs := parsePredictRequest([]byte("{\"image\":\"eA==\",\"query\":\"d\xffg\"}"))
	if errs != nil || req.Query != "d\uFFFDg" {
		t.Fatalf("query %q errs %v, want the invalid byte replaced as encoding/json does", req.Query, errs)
	}
}

func TestDecodeImage(t *testing.T) {
	for _, s := range []string{"aGVsbG8=", "aGVsbG8", "aGVs\r\nbG8=", " aGVsbG8= ", "data:image/png;base64,aGVsbG8="} {
		b, err := decodeImage(s)
		if err != nil || string(b) != "hello" {
			t.Errorf("%q: %q, %v", s, b, err)
		}
	}
	for _, s := range []string{"", "  ", "aGVs*bG8=", "aGVsbG8-", "a"} {
		if b, err := decodeImage(s); err == nil {
			t.Errorf("%q decoded to %q, want an error", s, b)
		}
	}
}

func TestPyFloatWritesFloatsAsPython(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0.0", 282: "282.0", -3: "-3.0", 49.5: "49.5", 0.1: "0.1", 1e-5: "1e-05", 1e16: "1e+16", 123456.789: "123456.789",
	} {
		got, err := pyFloat(v).MarshalJSON()
		if err != nil || string(got) != want {
			t.Errorf("%v: %s, %v; want %s", v, got, err, want)
		}
	}
	for _, v := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := pyFloat(v).MarshalJSON(); err == nil {
			t.Errorf("%v encoded, want an error as Python's json.dumps(allow_nan=False)", v)
		}
	}
}
