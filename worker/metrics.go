package worker

import (
	"context"
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
)

// newRegistry is the worker's own registry (never the global one): Go and process
// collectors plus whatever the caller registers.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// registerChip exposes chip i's busy ratio, queue length and batch occupancy.
func registerChip(reg prometheus.Registerer, i int, c *chip.Chip) {
	labels := prometheus.Labels{"chip": strconv.Itoa(i)}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "la_device_busy_ratio", Help: "Fraction of the chip's lifetime spent generating.", ConstLabels: labels,
		}, c.BusyRatio),
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

// listenMetrics opens addr, so that a bad LA_METRICS_ADDR fails the start-up.
func listenMetrics(addr string, reg *prometheus.Registry) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen on %s (LA_METRICS_ADDR): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
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
