package config

import (
	"strings"
	"testing"
)

// TestOTLPSettings: traces are off by default; the endpoint must be an HTTP(S) URL; the
// headers parse as key=value pairs with URL-encoded values, and a malformed one is
// refused without its value in the message (it holds credentials).
func TestOTLPSettings(t *testing.T) {
	var o Observe
	if o.TracesEnabled() {
		t.Fatal("traces on with no OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	check := func(o Observe) []string {
		var errs []string
		o.LogFormat, o.LogLevel = "auto", "info"
		errs = messages(o.Validate())
		return errs
	}
	if errs := check(Observe{OTLPEndpoint: "http://otel-collector:4318", OTLPHeaders: "authorization=Bearer%20s3cret, x-team=vision"}); len(errs) > 0 {
		t.Fatalf("a valid endpoint and headers refused: %v", errs)
	}
	for _, bad := range []string{"otel-collector:4318", "grpc://otel:4317", "http://"} {
		errs := check(Observe{OTLPEndpoint: bad})
		if len(errs) != 1 || !strings.Contains(errs[0], "OTEL_EXPORTER_OTLP_ENDPOINT") {
			t.Errorf("endpoint %q: %v; want one error naming OTEL_EXPORTER_OTLP_ENDPOINT", bad, errs)
		}
	}
	h, err := Observe{OTLPHeaders: "authorization=Bearer%20s3cret, x-team=vision"}.OTLPHeaderMap()
	if err != nil || h["authorization"] != "Bearer s3cret" || h["x-team"] != "vision" || len(h) != 2 {
		t.Errorf("headers %v, %v", h, err)
	}
	for _, bad := range []string{"s3cret", "authorization=%zzs3cret"} {
		errs := check(Observe{OTLPHeaders: bad})
		if len(errs) != 1 || strings.Contains(errs[0], "s3cret") || !strings.Contains(errs[0], "OTEL_EXPORTER_OTLP_HEADERS") {
			t.Errorf("headers %q: %v; want one error naming the variable and not the value", bad, errs)
		}
	}
}
