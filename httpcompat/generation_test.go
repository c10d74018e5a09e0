package httpcompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/internal/rawjson"
)

// TestPredictRefusesAnUnknownGenerationMode: generation_mode takes the engine's modes; any
// other string is the client's mistake (400, naming the field and the modes it takes), a
// non-string does not fit the request model (422), and the chip never sees either.
func TestPredictRefusesAnUnknownGenerationMode(t *testing.T) {
	h := newHarness(t, setup{})
	img := dogB64(t)
	for _, mode := range []string{"fast", "HYBRID", "slow", "ar "} {
		status, body := h.predict(t, map[string]any{"image": img, "query": "dog", "generation_mode": mode})
		d := detailString(t, body)
		if status != http.StatusBadRequest || !strings.Contains(d, "generation_mode") || !strings.Contains(d, "ar, hybrid") {
			t.Errorf("generation_mode %q: %d %s, want 400 naming generation_mode and ar, hybrid", mode, status, body)
		}
	}
	status, body := h.predict(t, map[string]any{"image": img, "query": "dog", "generation_mode": []string{"ar"}})
	if status != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte(`"loc":["body","generation_mode"]`)) {
		t.Errorf("generation_mode as a list: %d %s, want 422 at body.generation_mode", status, body)
	}
	if n := h.eng.Calls("dog"); n != 0 {
		t.Errorf("the engine ran %d refused requests", n)
	}
}

// TestCheckRequestCarriesTheGenerationMode: the mode a client names reaches the engine's
// request; none (absent, null or "") leaves the engine's default.
func TestCheckRequestCarriesTheGenerationMode(t *testing.T) {
	for body, want := range map[string]engine.GenerationMode{
		`{"image": "iVBORw0KGgo=", "query": "dog", "generation_mode": "hybrid"}`: engine.GenerationHybrid,
		`{"image": "iVBORw0KGgo=", "query": "dog", "generation_mode": "ar"}`:     engine.GenerationAR,
		`{"image": "iVBORw0KGgo=", "query": "dog", "generation_mode": null}`:     "",
		`{"image": "iVBORw0KGgo=", "query": "dog", "generation_mode": ""}`:       "",
		`{"image": "iVBORw0KGgo=", "query": "dog"}`:                              "",
	} {
		req, invalid := parsePredictRequest([]byte(body))
		if len(invalid) > 0 {
			t.Fatalf("%s: %v", body, invalid)
		}
		ereq, err := checkRequest(req, limits{maxNewTokens: 64, maxQueryChars: 1000})
		if err != nil || ereq.GenerationMode != want {
			t.Errorf("%s: request mode %q (err %v), want %q", body, ereq.GenerationMode, err, want)
		}
	}
	req, _ := parsePredictRequest([]byte(`{"image": "iVBORw0KGgo=", "query": "dog", "generation_mode": "fast"}`))
	_, err := checkRequest(req, limits{maxNewTokens: 64, maxQueryChars: 1000})
	if ie, ok := engine.AsInputError(err); !ok || ie.Code != engine.CodeBadGeneration {
		t.Errorf("generation_mode fast: %v, want an input error with code %s", err, engine.CodeBadGeneration)
	}
}

// TestPredictResponseWritesDecodeStepsForHybridAnswersOnly: an AR answer is written exactly
// as the struct's fields say (the upstream bytes); a hybrid one has decode_steps right
// after num_generated_tokens, and fits the response schema /openapi.json states.
func TestPredictResponseWritesDecodeStepsForHybridAnswersOnly(t *testing.T) {
	pred := &engine.Prediction{
		// A query that spells the key the addition is written before: it stays in its string.
		Query: `dog","stopped_on_eos":true,"x`, Width: 640, Height: 480, RawText: "<ref>dog</ref><box><1><2><3><4></box><|im_end|>",
		Detections:         []engine.Detection{{Label: "dog", Box: [4]float64{1, 2, 3, 4}, BoxNorm: [4]int{1, 2, 3, 4}, Score: 0.5}},
		NumGeneratedTokens: 13, StoppedOnEOS: true, DecodeMode: "ar_greedy_trace",
		GenerationMode: engine.GenerationAR, DecodeSteps: 12,
	}
	type plain PredictResponse
	ar, err := rawjson.Marshal(NewPredictResponse(pred, nil))
	if err != nil {
		t.Fatal(err)
	}
	upstream, _ := rawjson.Marshal(plain(NewPredictResponse(pred, nil)))
	if !bytes.Equal(ar, upstream) || bytes.Contains(ar, []byte("decode_steps")) {
		t.Errorf("AR answer:\n%s\nwant the struct's own bytes:\n%s", ar, upstream)
	}

	pred.GenerationMode, pred.DecodeMode, pred.DecodeSteps = engine.GenerationHybrid, "hybrid_greedy", 4
	hy, err := rawjson.Marshal(NewPredictResponse(pred, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(predictKeys)
	at := slices.Index(want, "num_generated_tokens") + 1
	want = slices.Insert(want, at, "decode_steps")
	if got := topKeys(t, hy); !slices.Equal(got, want) {
		t.Errorf("hybrid answer keys %v, want %v", got, want)
	}
	m := object(t, hy)
	if m["decode_steps"] != json.Number("4") || m["decode_mode"] != "hybrid_greedy" || m["query"] != pred.Query {
		t.Errorf("hybrid answer: decode_steps %v decode_mode %v query %v", m["decode_steps"], m["decode_mode"], m["query"])
	}
	if !bytes.Equal(bytes.Replace(hy, []byte(`,"decode_steps":4`), nil, 1), bytes.Replace(upstream, []byte(`"ar_greedy_trace"`), []byte(`"hybrid_greedy"`), 1)) {
		t.Errorf("the hybrid answer differs from the AR one by more than decode_steps and decode_mode:\n%s\n%s", hy, upstream)
	}

	h := newHarness(t, setup{notReady: true})
	_, raw := h.get(t, "/openapi.json")
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(hy, &v); err != nil {
		t.Fatal(err)
	}
	if errs := doc.validate(doc.schema(t, "PredictResponse"), v, "hybrid answer"); len(errs) > 0 {
		t.Errorf("the hybrid answer does not fit PredictResponse: %v", errs)
	}
}

// topKeys lists the keys of the JSON object b in the order written.
func topKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestInfoReportsTheGenerationModes: /info says how a request that names no mode is
// decoded (the worker's LA_GENERATION_MODE, ar when unset) and which modes a request may
// name.
func TestInfoReportsTheGenerationModes(t *testing.T) {
	for _, c := range []struct {
		opt  engine.GenerationMode
		want string
	}{{"", "ar"}, {engine.GenerationAR, "ar"}, {engine.GenerationHybrid, "hybrid"}} {
		h := newHarness(t, setup{opts: Options{GenerationMode: c.opt}})
		_, body := h.get(t, "/info")
		m := object(t, body)
		modes, _ := m["generation_modes"].([]any)
		if m["generation_mode"] != c.want || len(modes) != 2 || modes[0] != "ar" || modes[1] != "hybrid" {
			t.Errorf("default %q: generation_mode %v, generation_modes %v; want %s and [ar hybrid]",
				c.opt, m["generation_mode"], m["generation_modes"], c.want)
		}
	}
}

// blocksModel is a test checkpoint trained to write a box per block step
// (tools/refmodel/testdata/hybrid/tiny-shapes-blocks): the bundled model answers hybrid
// blocks with noise.
const blocksModel = "../tools/refmodel/testdata/hybrid/tiny-shapes-blocks"

// TestPredictHybridOnTheRealEngine: /predict on the C engine (the block-trained test model,
// CPU backend) with generation_mode hybrid answers what the engine answers in hybrid mode,
// says hybrid_greedy and how many steps it took, in fewer steps than its tokens; without the
// field, or with ar, the answer is the AR one in the upstream keys, with no decode_steps.
func TestPredictHybridOnTheRealEngine(t *testing.T) {
	c, err := chip.Open(func() (engine.Engine, error) {
		return pipeline.Open(pipeline.OpenOptions{
			Settings:   engine.Settings{Backend: "cpu", Threads: 1, MaxSeqLen: 512, MaxBatch: 2, CanonGrid: "native", MaxNewTokens: 48, MaxNewTokensCap: 48},
			WeightsDir: blocksModel,
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts := serveChip(t, c)
	img, err := os.ReadFile("../tools/tinymodel/testdata/heldout/05.png")
	if err != nil {
		t.Fatal(err)
	}
	direct := func(mode engine.GenerationMode) *engine.Prediction {
		prep, err := c.Engine().Prepare(t.Context(), engine.Request{Image: img, Query: "triangle", GenerationMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := c.Generate(t.Context(), chip.Interactive, prep)
		if err != nil {
			t.Fatal(err)
		}
		return pred
	}
	post := func(fields map[string]any) ([]byte, map[string]any) {
		body := map[string]any{"image": base64.StdEncoding.EncodeToString(img), "query": "triangle"}
		maps.Copy(body, fields)
		status, raw := postPredict(t, t.Context(), ts.URL, body)
		if status != http.StatusOK {
			t.Fatalf("%v: %d %s", fields, status, raw)
		}
		return raw, object(t, raw)
	}

	want := direct(engine.GenerationHybrid)
	raw, hy := post(map[string]any{"generation_mode": "hybrid"})
	keys := slices.Insert(slices.Clone(predictKeys), slices.Index(predictKeys, "num_generated_tokens")+1, "decode_steps")
	if got := topKeys(t, raw); !slices.Equal(got, keys) {
		t.Errorf("hybrid answer keys %v, want %v", got, keys)
	}
	steps, _ := hy["decode_steps"].(json.Number).Int64()
	tokens, _ := hy["num_generated_tokens"].(json.Number).Int64()
	if hy["decode_mode"] != "hybrid_greedy" || hy["raw_text"] != want.RawText || int(steps) != want.DecodeSteps || tokens != int64(want.NumGeneratedTokens) {
		t.Errorf("hybrid answer: decode_mode %v, raw_text %v, decode_steps %d, tokens %d; the engine's hybrid answer: %q in %d steps, %d tokens",
			hy["decode_mode"], hy["raw_text"], steps, tokens, want.RawText, want.DecodeSteps, want.NumGeneratedTokens)
	}
	if steps < 1 || steps >= tokens-1 {
		t.Errorf("hybrid answer took %d steps for %d tokens; the block model writes boxes in one step, want fewer than AR's %d",
			steps, tokens, tokens-1)
	}

	ar := direct(engine.GenerationAR)
	plainRaw, plain := post(nil)
	arRaw, named := post(map[string]any{"generation_mode": "ar"})
	for what, b := range map[string][]byte{"no generation_mode": plainRaw, "generation_mode ar": arRaw} {
		if got := topKeys(t, b); !slices.Equal(got, predictKeys) {
			t.Errorf("%s: keys %v, want the upstream %v", what, got, predictKeys)
		}
	}
	delete(plain, "timing_ms")
	delete(named, "timing_ms")
	if !reflect.DeepEqual(plain, named) || plain["decode_mode"] != "ar_greedy_trace" || plain["raw_text"] != ar.RawText {
		t.Errorf("AR answers: without the field %v, with ar %v; want equal, ar_greedy_trace, raw_text %q", plain, named, ar.RawText)
	}
	if ar.RawText == want.RawText {
		t.Logf("AR and hybrid answers agree here: %q", ar.RawText)
	}
}
