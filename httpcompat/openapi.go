package httpcompat

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPI is GET /openapi.json: the contract as an OpenAPI 3.1 document, written by hand
// beside the code it describes and held to it by TestOpenAPIDescribesWhatIsServed.
//
//go:embed openapi.json
var openAPI []byte

func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(openAPI)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI)
}
