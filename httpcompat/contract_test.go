package httpcompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
)

// predictKeys are the upstream server's keys, in its order.
var predictKeys = []string{
	"query", "width", "height", "canonical_size", "grid_hw", "num_image_tokens", "prompt_tokens",
	"prefill_tokens", "raw_text", "detections", "points", "num_generated_tokens", "stopped_on_eos",
	"decode_mode", "timing_ms", "overlay_png_b64",
}

// The additions to the upstream contract, after its keys (docs/http.md, "Additions"):
// warnings on the response (only when there are any) and a score on every detection and
// point. Clients of the upstream server ignore keys they do not know.
var (
	predictAdditions   = []string{"warnings", "simulated"}
	detectionKeys      = []string{"label", "box", "box_norm", "score"}
	pointKeys          = []string{"label", "point", "point_norm", "score"}
	upstreamDetections = detectionKeys[:3]
	upstreamPoints     = pointKeys[:3]
)

func TestPredictResponseContract(t *testing.T) {
	h := newHarness(t, setup{})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog</c>bicycle"})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	m := object(t, body)
	assertKeys(t, "/predict response", m, predictKeys...)

	if m["query"] != "dog</c>bicycle" {
		t.Errorf("query = %v", m["query"])
	}
	for _, k := range []string{"width", "height", "num_image_tokens", "prompt_tokens", "prefill_tokens", "num_generated_tokens"} {
		if !isInt(m[k]) {
			t.Errorf("%s = %v (%T), want an integer", k, m[k], m[k])
		}
	}
	if m["width"] != json.Number("768") || m["height"] != json.Number("576") {
		t.Errorf("width, height = %v, %v; want the original 768, 576", m["width"], m["height"])
	}
	if got := list(t, "canonical_size", m["canonical_size"], 2, isInt); got[0] != json.Number("616") || got[1] != json.Number("336") {
		t.Errorf("canonical_size = %v, want [616, 336] (W, H)", got)
	}
	if got := list(t, "grid_hw", m["grid_hw"], 2, isInt); got[0] != json.Number("24") || got[1] != json.Number("44") {
		t.Errorf("grid_hw = %v, want [24, 44] (h, w)", got)
	}
	if m["num_image_tokens"] != json.Number("264") {
		t.Errorf("num_image_tokens = %v, want 264", m["num_image_tokens"])
	}
	if raw, _ := m["raw_text"].(string); !strings.HasPrefix(raw, "<ref>dog</ref><box>") || !strings.HasSuffix(raw, "<|im_end|>") {
		t.Errorf("raw_text = %q", m["raw_text"])
	}
	if !bytes.Contains(body, []byte(`"raw_text":"<ref>dog</ref>`)) {
		t.Errorf("raw_text is escaped on the wire; FastAPI writes < and > as they are: %.200s", body)
	}
	if m["stopped_on_eos"] != true || !isBool(m["stopped_on_eos"]) {
		t.Errorf("stopped_on_eos = %v", m["stopped_on_eos"])
	}
	if m["decode_mode"] != "ar_greedy" {
		t.Errorf("decode_mode = %v", m["decode_mode"])
	}
	if m["overlay_png_b64"] != nil {
		t.Errorf("overlay_png_b64 = %.40v, want null when not requested", m["overlay_png_b64"])
	}

	dets := list(t, "detections", m["detections"], 2, nil)
	for i, d := range dets {
		det, ok := d.(map[string]any)
		if !ok {
			t.Fatalf("detections[%d] is %T", i, d)
		}
		assertKeys(t, "detection", det, detectionKeys...)
		if !isString(det["label"]) {
			t.Errorf("label is %T", det["label"])
		}
		if sc, _ := det["score"].(json.Number).Float64(); !isFloat(det["score"]) || sc < 0 || sc > 1 {
			t.Errorf("score = %v, want a float in 0..1", det["score"])
		}
		box := list(t, "box", det["box"], 4, isFloat)
		norm := list(t, "box_norm", det["box_norm"], 4, isInt)
		// box is box_norm mapped to the original pixels: v / 1000 * size.
		for j := range 4 {
			size := 768.0
			if j%2 == 1 {
				size = 576
			}
			n, _ := norm[j].(json.Number).Int64()
			b, _ := box[j].(json.Number).Float64()
			if want := float64(n) / 1000 * size; b != want {
				t.Errorf("box[%d] = %v, want %v from box_norm %d", j, b, want, n)
			}
		}
	}
	if dets[0].(map[string]any)["label"] != "dog" || dets[1].(map[string]any)["label"] != "bicycle" {
		t.Errorf("labels %v, want dog then bicycle", dets)
	}
	list(t, "points", m["points"], 0, nil)

	tm, ok := m["timing_ms"].(map[string]any)
	if !ok {
		t.Fatalf("timing_ms is %T", m["timing_ms"])
	}
	assertKeys(t, "timing_ms", tm, "vision", "prefill", "decode", "total", "decode_tok_s")
	for k, v := range tm {
		if !isFloat(v) {
			t.Errorf("timing_ms.%s = %v, want a float as Python writes it (49.0)", k, v)
		}
	}
}

func TestPredictOverlayIsADecodablePNG(t *testing.T) {
	h := newHarness(t, setup{})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog", "return_overlay": true})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	m := object(t, body)
	b64, ok := m["overlay_png_b64"].(string)
	if !ok {
		t.Fatalf("overlay_png_b64 is %T, want a string", m["overlay_png_b64"])
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("overlay is not base64: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("overlay is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 576 {
		t.Fatalf("overlay is %v, want the original 768x576", b)
	}
}

func TestPredictEmptyAnswerHasEmptyLists(t *testing.T) {
	h := newHarness(t, setup{})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": enginetest.NothingLabel})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if !bytes.Contains(body, []byte(`"detections":[]`)) || !bytes.Contains(body, []byte(`"points":[]`)) {
		t.Fatalf("want empty lists, not null: %s", body)
	}
}

func TestPredictPointTaskExtension(t *testing.T) {
	h := newHarness(t, setup{})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "the dog's nose", "task": "point"})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	m := object(t, body)
	list(t, "detections", m["detections"], 0, nil)
	pts := list(t, "points", m["points"], 1, nil)
	p := pts[0].(map[string]any)
	assertKeys(t, "point", p, pointKeys...)
	if sc, _ := p["score"].(json.Number).Float64(); !isFloat(p["score"]) || sc < 0 || sc > 1 {
		t.Errorf("score = %v, want a float in 0..1", p["score"])
	}
	list(t, "point", p["point"], 2, isFloat)
	list(t, "point_norm", p["point_norm"], 2, isInt)
}

func TestPredictAcceptsWhatThePythonServerAccepts(t *testing.T) {
	h := newHarness(t, setup{})
	img := dogB64(t)
	var wrapped strings.Builder // MIME-style base64: 76 columns with line breaks
	for i := 0; i < len(img); i += 76 {
		wrapped.WriteString(img[i:min(i+76, len(img))] + "\n")
	}
	cases := []struct {
		name   string
		body   map[string]any
		tokens int // num_generated_tokens; 0 = do not check
		eos    bool
	}{
		{"unknown fields are ignored", map[string]any{"image": img, "query": "dog", "temperature": 0.7, "extra": map[string]any{}}, 0, true},
		{"null max_new_tokens is the default", map[string]any{"image": img, "query": "dog", "max_new_tokens": nil}, 0, true},
		{"budget of 1", map[string]any{"image": img, "query": "dog", "max_new_tokens": 1}, 0, false},
		{"budget at the cap", map[string]any{"image": img, "query": "dog", "max_new_tokens": 1024}, 10, true},
		{"integer as a string (pydantic lax)", map[string]any{"image": img, "query": "dog", "max_new_tokens": "64"}, 10, true},
		{"integer as a whole float", map[string]any{"image": img, "query": "dog", "max_new_tokens": 64.0}, 10, true},
		{"bool as a string", map[string]any{"image": img, "query": "dog", "return_overlay": "false"}, 0, true},
		{"1000-character query", map[string]any{"image": img, "query": strings.Repeat("d", 1000)}, 0, true},
		{"1000 characters, 2000 bytes", map[string]any{"image": img, "query": strings.Repeat("é", 1000)}, 0, true},
		{"base64 with line breaks", map[string]any{"image": wrapped.String(), "query": "dog"}, 0, true},
		{"base64 without padding", map[string]any{"image": strings.TrimRight(img, "="), "query": "dog"}, 0, true},
		{"data URL", map[string]any{"image": "data:image/jpeg;base64," + img, "query": "dog"}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := h.predict(t, c.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %.300s", status, body)
			}
			m := object(t, body)
			if m["stopped_on_eos"] != c.eos {
				t.Errorf("stopped_on_eos = %v, want %v", m["stopped_on_eos"], c.eos)
			}
			if c.tokens > 0 && m["num_generated_tokens"] != json.Number(strconv.Itoa(c.tokens)) {
				t.Errorf("num_generated_tokens = %v, want %d", m["num_generated_tokens"], c.tokens)
			}
		})
	}
}

// TestPredictBadRequests covers every 400: FastAPI's HTTPException body {"detail": "..."}.
func TestPredictBadRequests(t *testing.T) {
	h := newHarness(t, setup{})
	img := dogB64(t)
	notImage := base64.StdEncoding.EncodeToString([]byte("this is not a picture"))
	cases := []struct {
		name string
		body map[string]any
		want string // in the detail
	}{
		{"bad base64", map[string]any{"image": "not*base64!", "query": "dog"}, "base64"},
		{"empty image", map[string]any{"image": "", "query": "dog"}, "empty"},
		{"bytes that are no image", map[string]any{"image": notImage, "query": "dog"}, "decode"},
		{"empty query", map[string]any{"image": img, "query": ""}, "query"},
		{"blank query", map[string]any{"image": img, "query": "  \n"}, "query"},
		{"over-long query", map[string]any{"image": img, "query": strings.Repeat("d", 1001)}, "1000"},
		{"budget 0", map[string]any{"image": img, "query": "dog", "max_new_tokens": 0}, "max_new_tokens"},
		{"negative budget", map[string]any{"image": img, "query": "dog", "max_new_tokens": -5}, "max_new_tokens"},
		{"budget over the cap", map[string]any{"image": img, "query": "dog", "max_new_tokens": 1025}, "1024"},
		{"huge budget", map[string]any{"image": img, "query": "dog", "max_new_tokens": 1e30}, "max_new_tokens"},
		{"unknown task", map[string]any{"image": img, "query": "dog", "task": "segment"}, "task"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := h.predict(t, c.body)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", status, body)
			}
			if d := detailString(t, body); !strings.Contains(d, c.want) {
				t.Fatalf("detail %q does not mention %q", d, c.want)
			}
		})
	}
	if n := len(h.eng.Seen()); n != 0 {
		t.Fatalf("%d bad requests reached the chip", n)
	}
}

func TestPredictPromptTooLong(t *testing.T) {
	h := newHarness(t, setup{configure: func(e *enginetest.Engine) { e.Description.MaxSeqLen = 512 }})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": strings.Repeat("dog ", 100)})
	if status != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", status, body)
	}
	if d := detailString(t, body); !strings.Contains(d, "exceeds the context") {
		t.Fatalf("detail %q", d)
	}
}

// TestPredictRequestModelErrors covers what FastAPI rejects before the handler runs: 422 with
// a list of {type, loc, msg} entries.
func TestPredictRequestModelErrors(t *testing.T) {
	h := newHarness(t, setup{})
	img := dogB64(t)
	cases := []struct {
		name     string
		body     any
		wantType string
		wantLoc  string
	}{
		{"invalid JSON", `{"image": "x", "query": `, "json_invalid", `["body",24]`},
		{"a name given twice", `{"image":"x","query":"a","query":"b"}`, "json_invalid", `["body",25]`},
		{"not an object", `["dog"]`, "model_attributes_type", `["body"]`},
		{"null body", `null`, "model_attributes_type", `["body"]`},
		{"missing image", map[string]any{"query": "dog"}, "missing", `["body","image"]`},
		{"missing query", map[string]any{"image": img}, "missing", `["body","query"]`},
		{"query not a string", map[string]any{"image": img, "query": 7}, "string_type", `["body","query"]`},
		{"null query", map[string]any{"image": img, "query": nil}, "string_type", `["body","query"]`},
		{"budget with a fraction", map[string]any{"image": img, "query": "dog", "max_new_tokens": 12.5}, "int_from_float", `["body","max_new_tokens"]`},
		{"budget not a number", map[string]any{"image": img, "query": "dog", "max_new_tokens": "many"}, "int_parsing", `["body","max_new_tokens"]`},
		{"overlay not a bool", map[string]any{"image": img, "query": "dog", "return_overlay": "maybe"}, "bool_parsing", `["body","return_overlay"]`},
		{"overlay null", map[string]any{"image": img, "query": "dog", "return_overlay": nil}, "bool_type", `["body","return_overlay"]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := h.predict(t, c.body)
			if status != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422: %.300s", status, body)
			}
			var v struct {
				Detail []struct {
					Type string          `json:"type"`
					Loc  json.RawMessage `json:"loc"`
					Msg  string          `json:"msg"`
				} `json:"detail"`
			}
			if err := json.Unmarshal(body, &v); err != nil || len(v.Detail) != 1 {
				t.Fatalf("want one FastAPI validation entry, got %s (%v)", body, err)
			}
			e := v.Detail[0]
			if e.Type != c.wantType || string(e.Loc) != c.wantLoc || e.Msg == "" {
				t.Fatalf("entry %+v (loc %s), want type %s loc %s", e, e.Loc, c.wantType, c.wantLoc)
			}
		})
	}
}

func TestPredictBodyOverTheLimit(t *testing.T) {
	h := newHarness(t, setup{cfg: Config{MaxBodyBytes: 4096}})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog"})
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413: %.300s", status, body)
	}
	if d := detailString(t, body); !strings.Contains(d, "4096") {
		t.Fatalf("detail %q does not give the limit", d)
	}
}

func TestPredictEngineFailureIs500WithExceptionType(t *testing.T) {
	h := newHarness(t, setup{configure: func(e *enginetest.Engine) {
		e.Err = errors.New("device fault: DRAM read timeout")
	}})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog"})
	if status != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500: %s", status, body)
	}
	if d := detailString(t, body); d != "RuntimeError: device fault: DRAM read timeout" {
		t.Fatalf("detail %q, want \"ExceptionType: text\"", d)
	}
}

func TestPredictWhileStartingIs503(t *testing.T) {
	h := newHarness(t, setup{notReady: true})
	status, body := h.predict(t, map[string]any{"image": dogB64(t), "query": "dog"})
	if status != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", status, body)
	}
	if d := detailString(t, body); !strings.Contains(d, "starting") {
		t.Fatalf("detail %q", d)
	}
}

func TestHealthSaysStartingUntilReady(t *testing.T) {
	h := newHarness(t, setup{notReady: true, opts: Options{Device: "Blackhole p150a mesh 1x1"}})
	check := func(status, model, device string) {
		t.Helper()
		code, body := h.get(t, "/health")
		if code != http.StatusOK {
			t.Fatalf("/health status %d, want 200 always", code)
		}
		m := object(t, body)
		assertKeys(t, "/health", m, "status", "model", "device")
		if m["status"] != status || m["model"] != model || m["device"] != device {
			t.Fatalf("/health = %s, want status %q model %q device %q", body, status, model, device)
		}
	}
	check("starting", "LocateAnything-3B", "Blackhole p150a mesh 1x1")
	if code, _ := h.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while starting: %d, want 503", code)
	}
	if h.srv.Ready() {
		t.Fatal("Ready before SetReady")
	}
	if code, _ := h.get(t, "/info"); code != http.StatusServiceUnavailable {
		t.Fatalf("/info while starting: %d, want 503", code)
	}
	if err := h.srv.SetReady(h.chip); err != nil {
		t.Fatal(err)
	}
	check("ok", "LocateAnything-3B", "test double")
	if code, body := h.get(t, "/readyz"); code != http.StatusOK || object(t, body)["status"] != "ok" {
		t.Fatalf("/readyz once ready: %d %s, want 200 and status ok", code, body)
	}
	if err := h.srv.SetReady(h.chip); err == nil {
		t.Fatal("a second SetReady succeeded; the startup landmark would print twice")
	}
	if err := newServer(t, Config{}, Options{}).SetReady(nil); err == nil {
		t.Fatal("SetReady(nil) succeeded")
	}
}

func TestInfoContract(t *testing.T) {
	h := newHarness(t, setup{opts: Options{Chips: 2, Queue: "nats://127.0.0.1:4222 LA_JOBS/la-workers"}})
	status, body := h.get(t, "/info")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	m := object(t, body)
	assertKeys(t, "/info", m, "model", "model_id", "task", "tasks", "io", "hardware", "decode_mode",
		"generation_mode", "generation_modes", "precision", "weights", "source", "limits", "license", "worker")
	for _, k := range []string{"model", "model_id", "task", "hardware", "decode_mode", "precision", "license"} {
		if s, ok := m[k].(string); !ok || s == "" {
			t.Errorf("%s = %v, want a non-empty string", k, m[k])
		}
	}
	if m["model_id"] != "nvidia/LocateAnything-3B" || m["decode_mode"] != "ar_greedy" {
		t.Errorf("model_id %v decode_mode %v", m["model_id"], m["decode_mode"])
	}
	list(t, "tasks", m["tasks"], len(engine.Tasks), isString)

	io := m["io"].(map[string]any)
	assertKeys(t, "io", io, "input", "output")

	w := m["weights"].(map[string]any)
	assertKeys(t, "weights", w, "repo", "revision", "snapshot_dir", "extracted_dir")
	if w["revision"] != "c32291ca5e996f5a7a485845b4f57a233936bba0" {
		t.Errorf("weights.revision = %v", w["revision"])
	}

	src := m["source"].(map[string]any)
	assertKeys(t, "source", src, "repo", "commit", "modified")
	if src["repo"] != "github.com/locateanything/detect" || (src["commit"] != nil && !isString(src["commit"])) || !isBool(src["modified"]) {
		t.Errorf("source = %v", src)
	}

	lim := m["limits"].(map[string]any)
	assertKeys(t, "limits", lim, "canonical_grid", "canonical_size", "in_token_limit", "max_seq_len",
		"max_new_tokens", "max_new_tokens_cap", "min_query_chars", "max_query_chars", "max_body_bytes")
	if g := list(t, "canonical_grid", lim["canonical_grid"], 2, isInt); g[0] != json.Number("24") || g[1] != json.Number("44") {
		t.Errorf("canonical_grid = %v", g)
	}
	if s := list(t, "canonical_size", lim["canonical_size"], 2, isInt); s[0] != json.Number("616") || s[1] != json.Number("336") {
		t.Errorf("canonical_size = %v", s)
	}
	for k, want := range map[string]string{"in_token_limit": "1024", "max_seq_len": "4096", "max_new_tokens": "128",
		"max_new_tokens_cap": "1024", "min_query_chars": "1", "max_query_chars": "1000", "max_body_bytes": "67108864"} {
		if lim[k] != json.Number(want) {
			t.Errorf("limits.%s = %v, want %s", k, lim[k], want)
		}
	}

	wk := m["worker"].(map[string]any)
	assertKeys(t, "worker", wk, "backend", "chips", "queue", "go_version", "uptime_s")
	if wk["backend"] != "double" || wk["chips"] != json.Number("2") || wk["queue"] != "nats://127.0.0.1:4222 LA_JOBS/la-workers" {
		t.Errorf("worker = %v", wk)
	}
}

func TestInfoNativeGridAndNoQueueAreNull(t *testing.T) {
	h := newHarness(t, setup{configure: func(e *enginetest.Engine) { e.Description.CanonicalGrid = [2]int{} }})
	_, body := h.get(t, "/info")
	m := object(t, body)
	lim := m["limits"].(map[string]any)
	if lim["canonical_grid"] != nil || lim["canonical_size"] != nil {
		t.Errorf("native grid: canonical_grid %v canonical_size %v, want null", lim["canonical_grid"], lim["canonical_size"])
	}
	if q := m["worker"].(map[string]any)["queue"]; q != nil {
		t.Errorf("worker.queue = %v, want null for an HTTP-only worker", q)
	}
}

func TestModelsStub(t *testing.T) {
	for _, ready := range []bool{false, true} {
		h := newHarness(t, setup{notReady: !ready})
		status, body := h.get(t, "/v1/models")
		if status != http.StatusOK {
			t.Fatalf("ready=%v: status %d", ready, status)
		}
		m := object(t, body)
		assertKeys(t, "/v1/models", m, "object", "data")
		if m["object"] != "list" {
			t.Errorf("object = %v", m["object"])
		}
		data := list(t, "data", m["data"], 1, nil)
		e := data[0].(map[string]any)
		assertKeys(t, "model entry", e, "id", "object", "created", "owned_by")
		if e["id"] != "nvidia/LocateAnything-3B" || e["object"] != "model" || !isInt(e["created"]) {
			t.Errorf("model entry = %v", e)
		}
	}
}

func TestUnknownPathAndWrongMethod(t *testing.T) {
	h := newHarness(t, setup{})
	status, body := h.get(t, "/nope")
	if status != http.StatusNotFound || detailString(t, body) != "Not Found" {
		t.Fatalf("unknown path: %d %s", status, body)
	}
	resp, err := http.Get(h.url + "/predict")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /predict: %d Allow %q, want 405 Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
	status, body = do(t, t.Context(), http.MethodPost, h.url+"/health", nil)
	if status != http.StatusMethodNotAllowed || detailString(t, body) != "Method Not Allowed" {
		t.Fatalf("POST /health: %d %s", status, body)
	}
}

// TestResponseKeysMatchPrediction holds PredictResponse, and the shared answer types it
// writes, to the contract's keys.
func TestResponseKeysMatchPrediction(t *testing.T) {
	jsonKeys := func(typ reflect.Type) []string {
		var keys []string
		for f := range typ.Fields() {
			if tag := strings.Split(f.Tag.Get("json"), ",")[0]; tag != "-" && tag != "" {
				keys = append(keys, tag)
			}
		}
		return keys
	}
	pairs := []struct{ engine, served reflect.Type }{
		{reflect.TypeFor[engine.Detection](), reflect.TypeFor[detection]()},
		{reflect.TypeFor[engine.Point](), reflect.TypeFor[point]()},
		{reflect.TypeFor[engine.Timing](), reflect.TypeFor[timing]()},
	}
	for _, p := range pairs {
		if a, b := jsonKeys(p.engine), jsonKeys(p.served); !reflect.DeepEqual(a, b) {
			t.Errorf("%v keys %v, served %v keys %v", p.engine, a, p.served, b)
		}
	}
	want := append(slices.Clone(predictKeys), predictAdditions...)
	if got := jsonKeys(reflect.TypeFor[PredictResponse]()); !reflect.DeepEqual(got, want) {
		t.Errorf("served keys %v, want the contract's %v then the additions %v", got, predictKeys, predictAdditions)
	}
	// The upstream keys come first and in order, the additions after them.
	for typ, upstream := range map[reflect.Type][]string{
		reflect.TypeFor[detection](): upstreamDetections,
		reflect.TypeFor[point]():     upstreamPoints,
	} {
		if got := jsonKeys(typ); !slices.Equal(got[:len(upstream)], upstream) {
			t.Errorf("%v keys %v, want the contract's %v first", typ, got, upstream)
		}
	}
}
