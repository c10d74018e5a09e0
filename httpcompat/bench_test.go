package httpcompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkPredictShim measures what the HTTP layer adds to one /predict on a 768x576 JPEG
// (164 KB, 219 KB in base64): body read, request model, base64, response encoding, and the
// hand-off to the chip's owner goroutine. The engine double does no model work.
func BenchmarkPredictShim(b *testing.B) {
	h := newHarness(b, setup{})
	body, _ := json.Marshal(map[string]any{"image": base64.StdEncoding.EncodeToString(dogJPEG), "query": "dog</c>bicycle"})
	handler := h.srv.Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/predict", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkParsePredictRequest is the request-model step alone.
func BenchmarkParsePredictRequest(b *testing.B) {
	body, _ := json.Marshal(map[string]any{"image": base64.StdEncoding.EncodeToString(dogJPEG), "query": "dog", "max_new_tokens": 64})
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := parsePredictRequest(body); errs != nil {
			b.Fatal(errs)
		}
	}
}
