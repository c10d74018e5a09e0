package httpcompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/rawjson"
)

// FuzzPredictRequest runs a /predict body through what the handler does before the engine
// sees it (parsePredictRequest, then checkRequest under the limits of an engine.Info) and
// checks: nothing panics; a 422 entry is FastAPI's shape and encodes, and echoes at most
// 200 bytes of input; a body that parses has the values encoding/json reads; a request
// that passes the checks respects the limits (query 1..limit characters and not blank,
// max_new_tokens absent or 1..cap, a known task) and its image is the base64 of the body,
// so never larger than 3/4 of it.
func FuzzPredictRequest(f *testing.F) {
	png, err := os.ReadFile("../engine/imageproc/testdata/tiny_1x1.png")
	if err != nil {
		f.Fatal(err)
	}
	tiny := base64.StdEncoding.EncodeToString(png)
	for _, body := range []string{
		`{"image": "` + tiny + `", "query": "dog"}`,
		`{"image": "data:image/png;base64,` + tiny + `", "query": "person</c>car", "max_new_tokens": 64, "return_overlay": true, "task": "ground"}`,
		`{"image":"eA==","query":"q","max_new_tokens":" 64 ","return_overlay":1}`,
		`{"image":"eA==","query":"q","max_new_tokens":1e2,"return_overlay":"YES"}`,
		`{"image":"eA==","query":"q","max_new_tokens":1e300,"task":null}`,
		`{"image":"eA==","query":"caf\u00e9 \ud83d\ude42","max_new_tokens":-1}`,
		`{"image":"eA","query":"  ","max_new_tokens":0}`,
		`{"image":"aGVs\r\nbG8=","query":"x","task":"segment"}`,
		`{"image": "x", "query": `, `["dog"]`, `null`, `{"query": 7}`, `{"image":"eA==","query":"dog","max_new_tokens":12.5}`,
		`{"image":"eA==","query":"dog","max_new_tokens":"many","return_overlay":"maybe"}`,
		`{"Image":"ignored","image":"eA==","QUERY":"ignored","query":"q","query":"last"}`,
	} {
		f.Add([]byte(body), uint16(0), uint16(0))
		f.Add([]byte(body), uint16(8), uint16(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, tokenCap, queryCap uint16) {
		req, invalid := parsePredictRequest(body)
		if len(invalid) > 0 {
			checkFieldErrors(t, body, invalid)
			return
		}
		checkParsedValues(t, body, req)
		lim := limitsFor(engine.Info{MaxNewTokensCap: int(tokenCap), MaxQueryChars: int(queryCap)})
		ereq, err := checkRequest(req, lim)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%.300q: empty error", body)
			}
			return
		}
		n := utf8.RuneCountInString(ereq.Query)
		switch {
		case ereq.Query != req.Query || strings.TrimSpace(ereq.Query) == "" || n > lim.maxQueryChars:
			t.Fatalf("%.300q: accepted query %.300q (%d characters, limit %d)", body, ereq.Query, n, lim.maxQueryChars)
		case req.MaxNewTokens == nil && ereq.MaxNewTokens != 0,
			req.MaxNewTokens != nil && int64(ereq.MaxNewTokens) != *req.MaxNewTokens,
			ereq.MaxNewTokens < 0 || ereq.MaxNewTokens > lim.maxNewTokens,
			req.MaxNewTokens != nil && ereq.MaxNewTokens == 0:
			t.Fatalf("%.300q: accepted max_new_tokens %d (cap %d)", body, ereq.MaxNewTokens, lim.maxNewTokens)
		case !ereq.Task.Valid() || req.Task != "" && ereq.Task != req.Task:
			t.Fatalf("%.300q: accepted task %q", body, ereq.Task)
		case len(ereq.Image) > len(body)*3/4:
			t.Fatalf("%.300q: accepted an image of %d bytes from a %d-byte body", body, len(ereq.Image), len(body))
		case len(ereq.Image) == 0 && strings.Trim(req.Image, "= \t\r\n") != "":
			t.Fatalf("%.300q: accepted an empty image", body)
		}
		// Known: an image field of padding only ("=") passes checkRequest as 0 bytes, which
		// the engine's decoder then refuses (bad_image, "image is empty"): still a 400.
	})
}

// checkFieldErrors: each entry of a 422 is FastAPI's {type, loc: ["body", ...], msg,
// input?}, echoes at most 200 bytes, and the whole answer encodes.
func checkFieldErrors(t *testing.T, body []byte, errs []fieldError) {
	t.Helper()
	for _, e := range errs {
		if e.Type == "" || e.Msg == "" || len(e.Loc) == 0 || e.Loc[0] != "body" {
			t.Fatalf("%.300q: malformed 422 entry %+v", body, e)
		}
		if len(e.Input) > 200 || e.Input != nil && !json.Valid(e.Input) {
			t.Fatalf("%.300q: 422 entry echoes %d bytes: %.300s", body, len(e.Input), e.Input)
		}
	}
	if _, err := rawjson.Marshal(validationErrors{Detail: errs}); err != nil {
		t.Fatalf("%.300q: the 422 answer does not encode: %v", body, err)
	}
}

// checkParsedValues: a body that parses is a JSON object whose string fields are what
// encoding/json reads, whose max_new_tokens is the integer it holds and whose
// return_overlay is the boolean.
func checkParsedValues(t *testing.T, body []byte, req predictRequest) {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // 4e555 is a JSON number, if not a float64
	if err := dec.Decode(&m); err != nil || m == nil {
		t.Fatalf("%.300q parsed, but encoding/json says %v", body, err)
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	if req.Image != str("image") || req.Query != str("query") || string(req.Task) != str("task") {
		t.Fatalf("%.300q: image %.100q query %.100q task %.100q, encoding/json reads otherwise", body, req.Image, req.Query, req.Task)
	}
	switch v := m["max_new_tokens"].(type) {
	case nil:
		if req.MaxNewTokens != nil {
			t.Fatalf("%.300q: max_new_tokens %d from nothing", body, *req.MaxNewTokens)
		}
	case json.Number:
		want, err := v.Int64()
		if f, ferr := v.Float64(); err != nil && ferr == nil && math.Abs(f) < 1<<53 {
			want, err = int64(f), nil
		}
		if req.MaxNewTokens == nil || err == nil && *req.MaxNewTokens != want {
			t.Fatalf("%.300q: max_new_tokens %v read as %v", body, v, req.MaxNewTokens)
		}
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if req.MaxNewTokens == nil || err != nil || *req.MaxNewTokens != n {
			t.Fatalf("%.300q: max_new_tokens %q read as %v", body, v, req.MaxNewTokens)
		}
	default:
		t.Fatalf("%.300q: max_new_tokens %v accepted", body, v)
	}
	if b, ok := m["return_overlay"].(bool); ok && b != req.ReturnOverlay {
		t.Fatalf("%.300q: return_overlay %v read as %v", body, b, req.ReturnOverlay)
	}
}

// FuzzPredictForm runs a multipart/form-data /predict body through parseForm and
// checkRequest and checks: nothing panics; an unreadable body is an error with words; a 422
// entry is FastAPI's shape; a request that passes the checks respects the limits, and its
// image is bytes of the body or a URL, never both.
func FuzzPredictForm(f *testing.F) {
	png, err := os.ReadFile("../engine/imageproc/testdata/tiny_1x1.png")
	if err != nil {
		f.Fatal(err)
	}
	const boundary = "fuzzboundary"
	part := func(name, filename, value string) string {
		disp := `form-data; name="` + name + `"`
		if filename != "" {
			disp += `; filename="` + filename + `"`
		}
		return "--" + boundary + "\r\nContent-Disposition: " + disp + "\r\n\r\n" + value + "\r\n"
	}
	end := "--" + boundary + "--\r\n"
	for _, body := range []string{
		part("image", "tiny.png", string(png)) + part("query", "", "dog") + end,
		part("image", "tiny.png", string(png)) + part("query", "", "person</c>car") + part("max_new_tokens", "", " 64 ") +
			part("return_overlay", "", "YES") + part("task", "", "ground") + part("generation_mode", "", "hybrid") + end,
		part("image_url", "", "s3://images/a.png") + part("query", "", "dog") + end,
		part("image", "a.png", "") + part("image_url", "", "file:///x") + part("query", "", "q") + part("query", "", "q") + end,
		part("query", "", "d\xffg") + part("max_new_tokens", "", "1e2") + part("return_overlay", "", "maybe") + end,
		part("image", "tiny.png", string(png))[:30],
		"--" + boundary + "\r\nContent-Disposition: form-data\r\n\r\nx\r\n" + end,
	} {
		f.Add([]byte(body), uint16(0))
		f.Add([]byte(body), uint16(8))
	}
	f.Fuzz(func(t *testing.T, body []byte, tokenCap uint16) {
		req, invalid, err := parseForm(body, boundary)
		switch {
		case err != nil:
			if err.Error() == "" {
				t.Fatalf("%.300q: empty error", body)
			}
			return
		case len(invalid) > 0:
			checkFieldErrors(t, body, invalid)
			return
		}
		ereq, err := checkRequest(req, limitsFor(engine.Info{MaxNewTokensCap: int(tokenCap)}))
		if err != nil {
			return
		}
		switch {
		case strings.TrimSpace(ereq.Query) == "" || !utf8.ValidString(ereq.Query):
			t.Fatalf("%.300q: accepted query %.300q", body, ereq.Query)
		case (req.ImageURL != "") == (req.ImageBytes != nil):
			t.Fatalf("%.300q: image %d bytes and image_url %q", body, len(req.ImageBytes), req.ImageURL)
		case len(ereq.Image) > len(body):
			t.Fatalf("%.300q: an image of %d bytes from a %d-byte body", body, len(ereq.Image), len(body))
		case req.ImageURL == "" && len(ereq.Image) == 0:
			t.Fatalf("%.300q: accepted an empty image", body)
		}
	})
}
