package worker

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/locateanything/detect/config"
)

// collector is an OTLP/HTTP trace receiver: it keeps every span it is sent, by name,
// with its string and int attributes.
type collector struct {
	*httptest.Server
	mu      sync.Mutex
	paths   []string
	headers []http.Header
	spans   map[string][]map[string]string // name -> attributes of each span of that name
	service string
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{spans: map[string][]map[string]string{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		var req collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &req)
		}
		if err != nil {
			t.Errorf("collector: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.paths = append(c.paths, r.URL.Path)
		c.headers = append(c.headers, r.Header.Clone())
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					c.service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					attrs := map[string]string{}
					for _, kv := range s.GetAttributes() {
						attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
					}
					c.spans[s.GetName()] = append(c.spans[s.GetName()], attrs)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.Close)
	return c
}

// TestTracesGoToTheOTLPEndpoint: spans reach the collector at the standard traces path
// under OTEL_EXPORTER_OTLP_ENDPOINT, with OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_SERVICE_NAME applied; Shutdown flushes them.
func TestTracesGoToTheOTLPEndpoint(t *testing.T) {
	c := newCollector(t)
	o := config.Observe{OTLPEndpoint: c.URL + "/", OTLPHeaders: "authorization=Bearer%20t0ken", ServiceName: "la-test"}
	tp, err := newTracerProvider(t.Context(), o, "w1")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(t.Context(), "hello")
	span.End()
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.paths) != 1 || c.paths[0] != "/v1/traces" || len(c.spans["hello"]) != 1 {
		t.Fatalf("collector saw paths %v and spans %v; want one export to /v1/traces with the span", c.paths, c.spans)
	}
	if got := c.headers[0].Get("Authorization"); got != "Bearer t0ken" || c.service != "la-test" {
		t.Errorf("export with authorization %q, service %q", got, c.service)
	}
}
