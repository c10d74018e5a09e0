package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/internal/bearer"
	"github.com/locateanything/detect/internal/version"
)

// newRegistry is the worker's own registry (never the global one): Go and process
// collectors, la_build_info, plus whatever the caller registers.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	v := version.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "la_build_info", Help: "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "goversion": v.GoVersion},
	})
	build.Set(1)
	reg.MustRegister(build)
	return reg
}

// registerChip exposes what engine chip i runs (la_engine_info: the model, the backend and
// whether its answers are simulated, so that a dashboard cannot take LA_ENGINE=sim for the
// model), its busy ratio and busy seconds, queue length, batch occupancy and tokens
// generated.
func registerChip(reg prometheus.Registerer, i int, c *chip.Chip) {
	labels := prometheus.Labels{"chip": strconv.Itoa(i)}
	in := c.Engine().Info()
	engineInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "la_engine_info", Help: "Always 1; the labels say which model and engine the chip runs, and whether its answers are simulated (LA_ENGINE=sim).",
		ConstLabels: prometheus.Labels{"chip": strconv.Itoa(i), "model": in.Model, "backend": string(in.Backend), "simulated": strconv.FormatBool(in.Simulated)},
	})
	engineInfo.Set(1)
	reg.MustRegister(
		engineInfo,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "la_device_busy_ratio", Help: "Fraction of the last minute the chip spent in device calls.", ConstLabels: labels,
		}, c.BusyRatio),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "la_device_busy_seconds_total", Help: "Device time of the chip since it opened (rate() of it is the busy ratio over any range).", ConstLabels: labels,
		}, c.BusySeconds),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "la_tokens_generated_total", Help: "Tokens the chip generated, for /predict and jobs alike.", ConstLabels: labels,
		}, func() float64 { return float64(c.GeneratedTokens()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "la_device_waiting", Help: "Requests queued for the chip and not started.", ConstLabels: labels,
		}, func() float64 { return float64(c.Waiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "la_device_running", Help: "Sequences the chip is decoding now (its batch).", ConstLabels: labels,
		}, func() float64 { return float64(c.Running()) }),
	)
}

// metricsServer serves /metrics from the worker's registry.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenMetrics opens addr, so that a bad LA_METRICS_ADDR fails the start-up. Beside
// /metrics it answers the probes /livez and /readyz (ready: nil when ready, else why not),
// so a worker without the /predict server can be probed too. /metrics asks for the bearer
// token LA_HTTP_TOKEN when guard is on; the probes never do (kubelet sends none).
func listenMetrics(addr string, reg *prometheus.Registry, ready func() error, guard bearer.Guard) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen on %s (LA_METRICS_ADDR): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", guard.Wrap(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		writeProbe(w, http.StatusOK, probe{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			writeProbe(w, http.StatusServiceUnavailable, probe{Status: "unavailable", Reason: err.Error()})
			return
		}
		writeProbe(w, http.StatusOK, probe{Status: "ok"})
	})
	return &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// probe is the body of /livez and /readyz on the metrics port, as on the /predict port.
type probe struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

func writeProbe(w http.ResponseWriter, code int, p probe) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(p)
}

// Addr is the address actually listened on.
func (m *metricsServer) Addr() string { return m.ln.Addr().String() }

// serve answers until ctx ends, then shuts the server down and returns.
func (m *metricsServer) serve(ctx context.Context, log *slog.Logger) {
	served := make(chan error, 1)
	go func() { served <- m.srv.Serve(m.ln) }()
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
		return
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(sctx)
	<-served
}
