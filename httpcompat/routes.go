package httpcompat

import (
	"net/http"
	"runtime/debug"
)

// routeMethods is every path the contract serves and its one method, for 405 answers.
var routeMethods = map[string]string{
	"/health":       http.MethodGet,
	"/livez":        http.MethodGet,
	"/readyz":       http.MethodGet,
	"/info":         http.MethodGet,
	"/v1/models":    http.MethodGet,
	"/openapi.json": http.MethodGet,
	"/predict":      http.MethodPost,
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /livez", s.handleLivez)
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	mux.Handle("GET /info", s.authorized(http.HandlerFunc(s.handleInfo)))
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /openapi.json", s.handleOpenAPI)
	// measured outside a recoverPanics of its own, so a panic is counted as the 500 it is.
	mux.Handle("POST /predict", s.opts.Metrics.measured(s.recoverPanics(s.authorized(http.HandlerFunc(s.handlePredict))).ServeHTTP))
	for prefix, h := range s.opts.Mounts {
		mux.Handle(prefix, h)
	}
	mux.HandleFunc("/", s.handleUnrouted)
	return s.recoverPanics(mux)
}

// TokenRealm is the realm of the bearer challenge (WWW-Authenticate) on a 401.
const TokenRealm = "locateanything-detect"

// authorized lets a request through to next when LA_HTTP_TOKEN is unset or the request
// carries it (Authorization: Bearer <token>); otherwise it answers 401 with the bearer
// challenge, before any of the body is read.
func (s *Server) authorized(next http.Handler) http.Handler {
	if !s.guard.On() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.guard.Check(r); err != nil {
			s.log.Info("request refused: no valid bearer token", "path", r.URL.Path, "status", http.StatusUnauthorized, "err", err)
			s.guard.Challenge(w, err)
			s.writeDetail(w, http.StatusUnauthorized, "%v", err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handleUnrouted answers 404 and 405 with FastAPI's bodies instead of net/http's plain text.
func (s *Server) handleUnrouted(w http.ResponseWriter, r *http.Request) {
	if method, ok := routeMethods[r.URL.Path]; ok {
		w.Header().Set("Allow", method)
		s.writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
	s.writeDetail(w, http.StatusNotFound, "Not Found")
}

// recoverPanics turns a panic in a handler into a logged stack and a 500 whose body says
// nothing about the code: no stack trace ever reaches a client.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("http handler panicked", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			s.writeDetail(w, http.StatusInternalServerError, "RuntimeError: internal error")
		}()
		next.ServeHTTP(w, r)
	})
}
