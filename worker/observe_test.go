package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// scrape reads url's Prometheus text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return families
}

// sample is the value of the series of family name whose labels include want, summed
// over the series that match (a histogram counts its observations); ok is false when no
// series matches.
func sample(families map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, ok
}

// documentedSeries are the la_* series the metrics table of docs/worker.md lists.
func documentedSeries(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/worker.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Metrics")
	if !ok {
		t.Fatal(`docs/worker.md has no "## Metrics" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(la_[a-z_]+)").FindAllStringSubmatch(table, -1) {
		names = append(names, m[1])
	}
	sort.Strings(names)
	return names
}

// TestObservabilityAfterAPredictAndAJob runs the real worker (the simulated chip on the
// bundled model, the embedded NATS) through one queued job and two /predict requests,
// then checks what an operator sees: every series docs/worker.md lists is on /metrics and
// none is missing from the list; the counts are those of the work done (the tokens
// counter is exactly the tokens of the answers); the queue is empty; the probes answer on
// both ports; /openapi.json is served.
func TestObservabilityAfterAPredictAndAJob(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cfg := singleMachineConfig(t, dataDir, freeport.MustAddr(t))
	cfg.Engine.Backend, cfg.Sim.Speed = "sim", 20
	cfg.Weights.Dir = filepath.Join(root, "models", "tiny-shapes")
	cfg.HTTP.Addr, cfg.Observe.MetricsAddr = freeport.MustAddr(t), freeport.MustAddr(t)
	traces := newCollector(t)
	cfg.Observe.OTLPEndpoint = traces.URL
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Open: OpenEngine})
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	base, metrics := "http://"+cfg.HTTP.Addr, "http://"+cfg.Observe.MetricsAddr
	waitHealthy(t, base)
	for _, url := range []string{base, metrics} {
		for _, probe := range []string{"/livez", "/readyz"} {
			resp, err := http.Get(url + probe)
			if err != nil {
				t.Fatal(err)
			}
			var body struct{ Status string }
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || body.Status != "ok" {
				t.Errorf("%s%s: %d %q once started; want 200 ok", url, probe, resp.StatusCode, body.Status)
			}
		}
	}
	if resp, err := http.Get(base + "/openapi.json"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/openapi.json: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// A queued job...
	js := publisher(t, cfg.Embedded.Listen)
	publishJob(t, js, "observed", "dog</c>person")
	var res jobs.Result
	testwait.Until(t, time.Minute, "the job's result", func() bool {
		var ok bool
		res, ok = readResult(t, dataDir, "observed")
		return ok
	})
	if res.Status != jobs.StatusSucceeded {
		t.Fatalf("job: %s %+v", res.Status, res.Error)
	}
	// ... and two /predict requests, one answered and one refused.
	img, err := os.ReadFile(filepath.Join(testImages, "dog.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"image": base64.StdEncoding.EncodeToString(img), "query": "dog"})
	resp, err := http.Post(base+"/predict", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var pred struct {
		NumGeneratedTokens int  `json:"num_generated_tokens"`
		Simulated          bool `json:"simulated"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pred); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/predict: %d %v", resp.StatusCode, err)
	}
	if !res.Simulated || !pred.Simulated {
		t.Errorf("the simulated chip's answers are not marked: result simulated %v, /predict simulated %v", res.Simulated, pred.Simulated)
	}
	resp.Body.Close()
	if resp, err = http.Post(base+"/predict", "application/json", strings.NewReader(`{"query": "dog"}`)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// The job's message is acknowledged just after its result is stored: wait for the
	// queue to say so, then read everything from one scrape.
	var families map[string]*dto.MetricFamily
	testwait.Until(t, time.Minute, "the queue to empty", func() bool {
		families = scrape(t, metrics+"/metrics")
		v, ok := sample(families, "la_queue_ack_pending", nil)
		return ok && v == 0
	})

	var served []string
	for name := range families {
		if strings.HasPrefix(name, "la_") {
			served = append(served, name)
		}
	}
	sort.Strings(served)
	if documented := documentedSeries(t); !slices.Equal(served, documented) {
		t.Errorf("/metrics serves %v\ndocs/worker.md lists %v", served, documented)
	}

	chip0 := map[string]string{"chip": "0"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"la_predict_requests_total", map[string]string{"status": "200"}, 1},
		{"la_predict_requests_total", map[string]string{"status": "422"}, 1},
		{"la_predict_request_seconds", map[string]string{"status": "200"}, 1},
		{"la_jobs_total", map[string]string{"outcome": "succeeded"}, 1},
		{"la_job_stage_seconds", map[string]string{"stage": "total"}, 1},
		{"la_job_decode_steps", map[string]string{"generation_mode": "ar"}, 1}, // LA_GENERATION_MODE's default
		{"la_job_decode_steps", map[string]string{"generation_mode": "hybrid"}, 0},
		{"la_tokens_generated_total", chip0, float64(res.NumGeneratedTokens + pred.NumGeneratedTokens)},
		{"la_queue_pending", map[string]string{"stream": jobs.JobsStream, "consumer": jobs.ConsumerName}, 0},
		{"la_dlq_messages", nil, 0},
		{"la_build_info", nil, 1},
		{"la_engine_info", map[string]string{"chip": "0", "model": "tiny-shapes", "backend": "sim", "simulated": "true"}, 1},
		{"la_device_running", chip0, 0},
	} {
		if v, ok := sample(families, c.name, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	if res.NumGeneratedTokens == 0 || pred.NumGeneratedTokens == 0 {
		t.Errorf("the answers hold %d and %d tokens; the tokens check proves nothing", res.NumGeneratedTokens, pred.NumGeneratedTokens)
	}
	for _, name := range []string{"la_device_busy_seconds_total", "la_device_busy_ratio"} {
		if v, ok := sample(families, name, chip0); !ok || v <= 0 {
			t.Errorf("%s{chip=0} = %v after a job and a /predict; want > 0", name, v)
		}
	}
	if f := families["la_build_info"]; f != nil {
		for _, l := range f.GetMetric()[0].GetLabel() {
			if l.GetValue() == "" {
				t.Errorf("la_build_info label %s is empty", l.GetName())
			}
		}
	}

	// The stop flushes the job's spans to the OTLP collector.
	stop()
	traces.mu.Lock()
	defer traces.mu.Unlock()
	if jobSpans := traces.spans[jobs.SpanJob]; len(jobSpans) != 1 || jobSpans[0]["la.job.id"] != "observed" || jobSpans[0]["la.job.status"] != "succeeded" {
		t.Errorf("job spans exported: %v; want the one job, succeeded", jobSpans)
	}
	for _, name := range []string{jobs.SpanFetch, jobs.SpanPreprocess, jobs.SpanChipWait, jobs.SpanDevice, jobs.SpanUpload, jobs.SpanPublish} {
		if len(traces.spans[name]) != 1 {
			t.Errorf("%d %q spans exported, want 1", len(traces.spans[name]), name)
		}
	}
}

// TestReadinessFollowsNATS: /readyz's check says "starting" until every phase is done,
// nil while the NATS connection is up, names the connection's state while it is down,
// and "stopping" once the worker stops.
func TestReadinessFollowsNATS(t *testing.T) {
	ns := natstest.Start(t)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s := &service{nc: nc}
	s.runCtx, s.stop = context.WithCancel(context.Background())
	defer s.stop()
	if err := s.readiness(); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("before the last phase: %v", err)
	}
	s.ready.Store(true)
	if err := s.readiness(); err != nil {
		t.Fatalf("started, NATS up: %v", err)
	}
	ns.Shutdown()
	testwait.Until(t, 10*time.Second, "readiness to see NATS gone", func() bool {
		err := s.readiness()
		return err != nil && strings.Contains(err.Error(), "NATS connection is reconnecting")
	})
	s.stop()
	if err := s.readiness(); err == nil || err.Error() != "stopping" {
		t.Fatalf("stopping: %v", err)
	}
}
