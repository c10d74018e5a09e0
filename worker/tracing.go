package worker

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/version"
)

// newTracerProvider exports the worker's spans over OTLP/HTTP to the collector at
// OTEL_EXPORTER_OTLP_ENDPOINT, in batches, sampling every job whose producer did not say
// otherwise (a producer's traceparent decides for its jobs). Shutdown flushes it.
func newTracerProvider(ctx context.Context, o config.Observe, worker string) (*sdktrace.TracerProvider, error) {
	headers, err := o.OTLPHeaderMap()
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx,
		otlptracehttp.WithEndpointURL(tracesURL(o.OTLPEndpoint)),
		otlptracehttp.WithHeaders(headers))
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT): %w", err)
	}
	v := version.Get()
	res := resource.NewSchemaless(
		attribute.String("service.name", o.ServiceName),
		attribute.String("service.version", v.Version),
		attribute.String("service.instance.id", worker),
		attribute.String("vcs.ref.head.revision", v.Commit),
	)
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	), nil
}

// tracesURL is where OTLP/HTTP traces go under the base endpoint: the standard variable
// names the collector's root, and the traces path is added to it.
func tracesURL(endpoint string) string {
	return strings.TrimSuffix(endpoint, "/") + "/v1/traces"
}
