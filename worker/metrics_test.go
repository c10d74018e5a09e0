package worker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/jobs"
)

func TestMetricsEndpointServesJobAndDeviceSeries(t *testing.T) {
	c, err := chip.Open(func() (engine.Engine, error) { return enginetest.New(), nil })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := newRegistry()
	m := jobs.NewMetrics(reg)
	m.Jobs.WithLabelValues(jobs.OutcomeSucceeded).Inc()
	registerChip(reg, 0, c)

	ms, err := listenMetrics("127.0.0.1:0", reg, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); ms.serve(ctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-served }()

	resp, err := http.Get("http://" + ms.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`la_jobs_total{outcome="succeeded"} 1`, `la_device_busy_ratio{chip="0"}`, `la_device_waiting{chip="0"} 0`, `la_device_running{chip="0"} 0`,
		`la_device_busy_seconds_total{chip="0"} 0`, `la_tokens_generated_total{chip="0"} 0`, `la_build_info{commit="`,
		"la_jobs_held", "la_jobs_running", "la_job_retries_total", "la_jobs_dead_lettered_total", "go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestMetricsAddressInUseFailsTheStart(t *testing.T) {
	ms, err := listenMetrics("127.0.0.1:0", newRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.ln.Close()
	if _, err := listenMetrics(ms.Addr(), newRegistry(), nil); err == nil || !strings.Contains(err.Error(), "LA_METRICS_ADDR") {
		t.Errorf("second listen on %s: %v; want an error naming LA_METRICS_ADDR", ms.Addr(), err)
	}
}
