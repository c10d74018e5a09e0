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
	"github.com/locateanything/detect/internal/bearer"
	"github.com/locateanything/detect/internal/bearer/bearertest"
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

	ms, err := listenMetrics("127.0.0.1:0", reg, func() error { return nil }, bearer.Guard{})
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
	ms, err := listenMetrics("127.0.0.1:0", newRegistry(), nil, bearer.Guard{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.ln.Close()
	if _, err := listenMetrics(ms.Addr(), newRegistry(), nil, bearer.Guard{}); err == nil || !strings.Contains(err.Error(), "LA_METRICS_ADDR") {
		t.Errorf("second listen on %s: %v; want an error naming LA_METRICS_ADDR", ms.Addr(), err)
	}
}

// TestMetricsTokenGuardsMetricsNotProbes: with LA_HTTP_TOKEN set, /metrics answers 401
// with the bearer challenge unless the scrape sends the token; /livez and /readyz stay
// open for the kubelet, which sends none.
func TestMetricsTokenGuardsMetricsNotProbes(t *testing.T) {
	const token = "metrics-token-123"
	ms, err := listenMetrics("127.0.0.1:0", newRegistry(), func() error { return nil }, bearer.New(token, "test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); ms.serve(ctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-served }()

	get := func(path, auth string) (int, string, string) {
		t.Helper()
		resp, body := bearertest.Do(t, http.MethodGet, "http://"+ms.Addr()+path, nil, auth)
		return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(body)
	}
	if code, challenge, _ := get("/metrics", ""); code != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer ") {
		t.Errorf("/metrics without the token: %d %q, want 401 with a Bearer challenge", code, challenge)
	}
	if code, _, _ := get("/metrics", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a wrong token: %d, want 401", code)
	}
	if code, _, body := get("/metrics", "Bearer "+token); code != http.StatusOK || !strings.Contains(body, "la_build_info") {
		t.Errorf("/metrics with the token: %d %.200s", code, body)
	}
	for _, probe := range []string{"/livez", "/readyz"} {
		if code, _, _ := get(probe, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200", probe, code)
		}
	}
}
