package httpcompat

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/decodemetrics"
)

// Metrics are the Prometheus series of /predict. A nil *Metrics records nothing.
type Metrics struct {
	requests *prometheus.CounterVec   // la_predict_requests_total{status}
	duration *prometheus.HistogramVec // la_predict_request_seconds{status}
	decode   decodemetrics.Series     // la_predict_decode_steps, la_predict_tokens_per_step
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "la_predict_requests_total",
			Help: "POST /predict requests answered, by HTTP status (499: the client went away first).",
		}, []string{"status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "la_predict_request_seconds",
			Help:    "Time from a POST /predict's headers to its answer, by HTTP status.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 17), // 5 ms .. ~5.5 min
		}, []string{"status"}),
	}
	m.decode = decodemetrics.New("la_predict", "/predict answer")
	reg.MustRegister(m.requests, m.duration)
	reg.MustRegister(m.decode.Collectors()...)
	return m
}

// decoded records how an answered /predict was decoded.
func (m *Metrics) decoded(p *engine.Prediction) {
	if m != nil {
		m.decode.Observe(p.GenerationMode, p.DecodeSteps, p.NumGeneratedTokens)
	}
}

// statusRecorder remembers the status a handler wrote (200 when it wrote none).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (the body-rate deadlines).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// measured counts and times each request next answers, by the status it wrote. A handler
// that panics is counted by recoverPanics' 500, which runs inside this.
func (m *Metrics) measured(next http.HandlerFunc) http.HandlerFunc {
	if m == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			code := strconv.Itoa(status)
			m.requests.WithLabelValues(code).Inc()
			m.duration.WithLabelValues(code).Observe(time.Since(start).Seconds())
		}()
		next(rec, r)
	}
}

// probeBody is /livez's and /readyz's answer beyond the /health fields.
type probeBody struct {
	Status string `json:"status"` // "ok" | "starting" | "unavailable"
	Model  string `json:"model,omitempty"`
	Device string `json:"device,omitempty"`
	Reason string `json:"reason,omitempty"` // why /readyz says no
}

// handleLivez is GET /livez: 200 while the process answers HTTP at all. Restarting a
// worker that is loading or waiting for NATS would not help it, so nothing else counts.
func (s *Server) handleLivez(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, probeBody{Status: "ok"})
}

// handleReadyz is an extension for orchestrators: 503 while starting (the engine is not
// loaded yet) and whenever Options.Ready reports a part the worker needs is down (NATS,
// for a worker that consumes the queue); 200 with the /health body otherwise. /health
// itself is 200 always, as the upstream Python server's is.
func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	st := s.ready.Load()
	if st == nil {
		s.writeJSON(w, http.StatusServiceUnavailable, probeBody{Status: "starting", Model: s.opts.Model, Device: s.opts.Device,
			Reason: "the engine is loading"})
		return
	}
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			s.writeJSON(w, http.StatusServiceUnavailable, probeBody{Status: "unavailable", Model: st.info.Model,
				Device: st.info.Device, Reason: err.Error()})
			return
		}
	}
	s.writeJSON(w, http.StatusOK, probeBody{Status: "ok", Model: st.info.Model, Device: st.info.Device})
}
