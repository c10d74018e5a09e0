package httpcompat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/locateanything/detect/internal/rawjson"
)

// StatusClientClosedRequest is what the log records for a client that went away before its
// answer (nginx's convention); nobody receives it.
const StatusClientClosedRequest = 499

// detail is the body of every error FastAPI's HTTPException produces: {"detail": "..."}.
type detail struct {
	Detail string `json:"detail"`
}

// fieldError is one entry of FastAPI's 422 body for a request that does not fit the
// request model: {"detail": [{"type", "loc", "msg", "input"?, "ctx"?}]}.
type fieldError struct {
	Type  string          `json:"type"`
	Loc   []any           `json:"loc"`
	Msg   string          `json:"msg"`
	Input json.RawMessage `json:"input,omitempty"`
	Ctx   map[string]any  `json:"ctx,omitempty"`
}

type validationErrors struct {
	Detail []fieldError `json:"detail"`
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := rawjson.Marshal(v)
	if err != nil {
		// The Python server fails the same way (json.dumps with allow_nan=False).
		s.log.Error("encode response", "err", err)
		status = http.StatusInternalServerError
		body, _ = rawjson.Marshal(detail{Detail: "ValueError: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) writeDetail(w http.ResponseWriter, status int, format string, args ...any) {
	s.writeJSON(w, status, detail{Detail: fmt.Sprintf(format, args...)})
}

// pyFloat is a float64 that encodes as Python's json module does: always with a fraction or
// an exponent (282.0, not 282), so a client sees the same JSON types from both servers.
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("out of range float value %v is not JSON compliant", v)
	}
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.AppendFloat(nil, v, 'e', -1, 64), nil // Python's repr: 1e-05, 1e+16
	}
	b := strconv.AppendFloat(nil, v, 'f', -1, 64)
	if !bytes.ContainsRune(b, '.') {
		b = append(b, ".0"...)
	}
	return b, nil
}
