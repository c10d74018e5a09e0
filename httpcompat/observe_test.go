package httpcompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
)

// predictSeries reads la_predict_requests_total and the sample count of
// la_predict_request_seconds by status from reg.
func predictSeries(t *testing.T, reg *prometheus.Registry) (requests, timed map[string]float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	requests, timed = map[string]float64{}, map[string]float64{}
	status := func(m *dto.Metric) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == "status" {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "la_predict_requests_total":
				requests[status(m)] = m.GetCounter().GetValue()
			case "la_predict_request_seconds":
				timed[status(m)] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return requests, timed
}

// TestPredictMetricsCountByStatus: every /predict answer is counted and timed under the
// status it had, the refusals and a panicking engine's 500 included; other routes are not.
func TestPredictMetricsCountByStatus(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, setup{opts: Options{Metrics: NewMetrics(reg)}, configure: func(e *enginetest.Engine) {
		e.OnCall = func(method, query string) {
			if method == "Prepare" && query == "boom" { // on the handler's goroutine
				panic("engine bug")
			}
		}
	}})
	img := dogB64(t)
	for _, c := range []struct {
		body any
		want int
	}{
		{map[string]any{"image": img, "query": "dog"}, http.StatusOK},
		{map[string]any{"image": img, "query": "dog</c>cat", "return_overlay": true}, http.StatusOK},
		{map[string]any{"query": "dog"}, http.StatusUnprocessableEntity},
		{map[string]any{"image": img, "query": " "}, http.StatusBadRequest},
		{map[string]any{"image": img, "query": "boom"}, http.StatusInternalServerError},
	} {
		if code, body := h.predict(t, c.body); code != c.want {
			t.Fatalf("%v: %d %s, want %d", c.body, code, body, c.want)
		}
	}
	h.get(t, "/health")
	h.get(t, "/info")
	requests, timed := predictSeries(t, reg)
	want := map[string]float64{"200": 2, "422": 1, "400": 1, "500": 1}
	if fmt.Sprint(requests) != fmt.Sprint(want) || fmt.Sprint(timed) != fmt.Sprint(want) {
		t.Fatalf("la_predict_requests_total %v and la_predict_request_seconds counts %v; want %v for both", requests, timed, want)
	}
	// The two answers are counted in the decode series too, as ar (the double names no
	// mode); the refusals are not.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	answers := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "la_predict_decode_steps" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				answers[l.GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if fmt.Sprint(answers) != fmt.Sprint(map[string]uint64{"ar": 2, "hybrid": 0}) {
		t.Errorf("la_predict_decode_steps counts %v, want ar 2 and hybrid 0", answers)
	}
}

// TestLivezAndReadyz: /livez is 200 from the start; /readyz is 503 while the engine loads
// and while the worker's readiness check fails (its reason in the body), 200 otherwise.
func TestLivezAndReadyz(t *testing.T) {
	var down atomic.Pointer[error]
	h := newHarness(t, setup{notReady: true, opts: Options{Ready: func() error {
		if err := down.Load(); err != nil {
			return *err
		}
		return nil
	}}})
	probe := func(path string, wantCode int, wantStatus, wantReason string) {
		t.Helper()
		code, body := h.get(t, path)
		m := object(t, body)
		if code != wantCode || m["status"] != wantStatus || !strings.Contains(fmt.Sprint(m["reason"]), wantReason) {
			t.Fatalf("%s: %d %s; want %d, status %q, a reason with %q", path, code, body, wantCode, wantStatus, wantReason)
		}
	}
	probe("/livez", http.StatusOK, "ok", "")
	probe("/readyz", http.StatusServiceUnavailable, "starting", "loading")
	if err := h.srv.SetReady(h.chip); err != nil {
		t.Fatal(err)
	}
	probe("/readyz", http.StatusOK, "ok", "")
	nats := errors.New("NATS: disconnected")
	down.Store(&nats)
	probe("/readyz", http.StatusServiceUnavailable, "unavailable", "NATS: disconnected")
	probe("/livez", http.StatusOK, "ok", "")
	if code, body := h.get(t, "/health"); code != http.StatusOK || object(t, body)["status"] != "ok" {
		t.Fatalf("/health while NATS is down: %d %s; want 200 ok (the upstream contract)", code, body)
	}
	down.Store(nil)
	probe("/readyz", http.StatusOK, "ok", "")
}

// TestOpenAPIDescribesWhatIsServed: /openapi.json lists exactly the routes the server
// answers, the request fields it reads and the tasks it takes, and every answer the
// server gives (the contract's and the extensions', successes and errors) fits the schema
// the document states for it.
func TestOpenAPIDescribesWhatIsServed(t *testing.T) {
	h := newHarness(t, setup{notReady: true})
	code, raw := h.get(t, "/openapi.json")
	if code != http.StatusOK {
		t.Fatalf("/openapi.json: %d", code)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("/openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	var routed, described []string
	for path, method := range routeMethods {
		routed = append(routed, strings.ToLower(method)+" "+path)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			described = append(described, method+" "+path)
		}
	}
	sort.Strings(routed)
	sort.Strings(described)
	if !slices.Equal(routed, described) {
		t.Fatalf("routes served %v, described %v", routed, described)
	}

	req := doc.schema(t, "PredictRequest")
	var fields []string
	for name := range req.Properties {
		fields = append(fields, name)
	}
	sort.Strings(fields)
	if want := []string{"generation_mode", "image", "image_url", "max_new_tokens", "query", "return_overlay", "task"}; !slices.Equal(fields, want) {
		t.Errorf("PredictRequest describes %v; parsePredictRequest reads %v", fields, want)
	}
	for name := range doc.schema(t, "PredictForm").Properties {
		if !isFormField(name) {
			t.Errorf("PredictForm describes %q, which parseForm does not read", name)
		}
	}
	if n := len(doc.schema(t, "PredictForm").Properties); n != len(fields) {
		t.Errorf("PredictForm describes %d fields, PredictRequest %d", n, len(fields))
	}
	var tasks []string
	for _, k := range engine.Tasks {
		tasks = append(tasks, string(k))
	}
	if got := fmt.Sprint(req.Properties["task"].Enum); got != fmt.Sprint(tasks) {
		t.Errorf("task enum %s, the engine's tasks %v", got, tasks)
	}
	if got := fmt.Sprint(req.Properties["generation_mode"].Enum); got != fmt.Sprint(engine.GenerationModes) {
		t.Errorf("generation_mode enum %s, the engine's modes %v", got, engine.GenerationModes)
	}

	check := func(path, schema string, body []byte) {
		t.Helper()
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if errs := doc.validate(doc.schema(t, schema), v, path); len(errs) > 0 {
			t.Errorf("%s does not fit %s:\n  %s\n%.600s", path, schema, strings.Join(errs, "\n  "), body)
		}
	}
	get := func(path string, wantCode int, schema string) {
		t.Helper()
		code, body := h.get(t, path)
		if code != wantCode {
			t.Fatalf("%s: %d, want %d", path, code, wantCode)
		}
		check(path, schema, body)
	}
	get("/health", http.StatusOK, "Health")
	get("/readyz", http.StatusServiceUnavailable, "Probe")
	get("/info", http.StatusServiceUnavailable, "Detail")
	if err := h.srv.SetReady(h.chip); err != nil {
		t.Fatal(err)
	}
	get("/health", http.StatusOK, "Health")
	get("/livez", http.StatusOK, "Probe")
	get("/readyz", http.StatusOK, "Probe")
	get("/info", http.StatusOK, "Info")
	get("/v1/models", http.StatusOK, "ModelList")

	img := dogB64(t)
	for _, c := range []struct {
		body   any
		code   int
		schema string
	}{
		{map[string]any{"image": img, "query": "dog</c>cat", "return_overlay": true}, http.StatusOK, "PredictResponse"},
		{map[string]any{"image": img, "query": "the dog", "task": "point"}, http.StatusOK, "PredictResponse"},
		{map[string]any{"image": img, "query": "red circle, blue square"}, http.StatusOK, "PredictResponse"},
		{map[string]any{"image": img}, http.StatusUnprocessableEntity, "ValidationError"},
		{map[string]any{"image": img, "query": "dog", "task": "dance"}, http.StatusBadRequest, "Detail"},
		{map[string]any{"image": img, "query": "dog", "generation_mode": "ar"}, http.StatusOK, "PredictResponse"},
		{map[string]any{"image": img, "query": "dog", "generation_mode": "fast"}, http.StatusBadRequest, "Detail"},
		{map[string]any{"image": img, "query": "dog", "generation_mode": 1}, http.StatusUnprocessableEntity, "ValidationError"},
	} {
		code, body := h.predict(t, c.body)
		if code != c.code {
			t.Fatalf("/predict %v: %d %s, want %d", c.body, code, body, c.code)
		}
		check(fmt.Sprintf("/predict (%d)", c.code), c.schema, body)
	}
}

// openAPIDoc is the part of an OpenAPI 3.1 document the test reads.
type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]*jsonSchema `json:"schemas"`
	} `json:"components"`
}

// jsonSchema is the subset of JSON Schema the document uses.
type jsonSchema struct {
	Ref                  string                 `json:"$ref"`
	Type                 any                    `json:"type"` // a name or a list of names
	Properties           map[string]*jsonSchema `json:"properties"`
	Required             []string               `json:"required"`
	AdditionalProperties *bool                  `json:"additionalProperties"`
	Items                *jsonSchema            `json:"items"`
	Enum                 []any                  `json:"enum"`
	MinItems             *int                   `json:"minItems"`
	MaxItems             *int                   `json:"maxItems"`
	Minimum              *float64               `json:"minimum"`
	Maximum              *float64               `json:"maximum"`
}

func (d *openAPIDoc) schema(t *testing.T, name string) *jsonSchema {
	t.Helper()
	s := d.Components.Schemas[name]
	if s == nil {
		t.Fatalf("no schema %q in /openapi.json", name)
	}
	return s
}

// validate lists where v departs from s (the keywords jsonSchema has).
func (d *openAPIDoc) validate(s *jsonSchema, v any, at string) []string {
	if s.Ref != "" {
		ref, ok := d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
		if !ok {
			return []string{at + ": unresolved " + s.Ref}
		}
		return d.validate(ref, v, at)
	}
	if s.Type != nil && !typeFits(s.Type, v) {
		return []string{fmt.Sprintf("%s: %T, want type %v", at, v, s.Type)}
	}
	var errs []string
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		errs = append(errs, fmt.Sprintf("%s: %v not in %v", at, v, s.Enum))
	}
	switch v := v.(type) {
	case map[string]any:
		for _, name := range s.Required {
			if _, ok := v[name]; !ok {
				errs = append(errs, fmt.Sprintf("%s: no %q", at, name))
			}
		}
		for name, fv := range v {
			ps, ok := s.Properties[name]
			if !ok {
				if s.AdditionalProperties != nil && !*s.AdditionalProperties {
					errs = append(errs, fmt.Sprintf("%s: %q is not described", at, name))
				}
				continue
			}
			errs = append(errs, d.validate(ps, fv, at+"."+name)...)
		}
	case []any:
		if s.MinItems != nil && len(v) < *s.MinItems || s.MaxItems != nil && len(v) > *s.MaxItems {
			errs = append(errs, fmt.Sprintf("%s: %d items", at, len(v)))
		}
		if s.Items != nil {
			for i, item := range v {
				errs = append(errs, d.validate(s.Items, item, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	case float64:
		if s.Minimum != nil && v < *s.Minimum || s.Maximum != nil && v > *s.Maximum {
			errs = append(errs, fmt.Sprintf("%s: %v out of range", at, v))
		}
	}
	return errs
}

// typeFits reports whether v, as encoding/json decodes it into any, is of one of the
// JSON Schema types named.
func typeFits(types any, v any) bool {
	var names []string
	switch ts := types.(type) {
	case string:
		names = []string{ts}
	case []any:
		for _, n := range ts {
			names = append(names, fmt.Sprint(n))
		}
	}
	for _, name := range names {
		switch x := v.(type) {
		case nil:
			if name == "null" {
				return true
			}
		case bool:
			if name == "boolean" {
				return true
			}
		case string:
			if name == "string" {
				return true
			}
		case float64:
			if name == "number" || name == "integer" && x == float64(int64(x)) {
				return true
			}
		case []any:
			if name == "array" {
				return true
			}
		case map[string]any:
			if name == "object" {
				return true
			}
		}
	}
	return false
}
