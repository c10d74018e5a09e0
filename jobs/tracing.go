package jobs

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span names: one per stage of a job, children of SpanJob (docs/worker.md, "Traces").
const (
	SpanJob        = "job"
	SpanFetch      = "fetch"
	SpanPreprocess = "preprocess"
	SpanChipWait   = "chip_wait"
	SpanDevice     = "device"
	SpanOverlay    = "overlay"
	SpanUpload     = "upload"
	SpanPublish    = "publish"
)

// TracerName is the instrumentation scope of the job spans.
const TracerName = "github.com/locateanything/detect/jobs"

// traceContext is the W3C Trace Context format (the traceparent and tracestate headers):
// what a producer puts in a job message's NATS headers to make the job's spans part of
// its trace, and what the worker puts in the result message it publishes.
var traceContext propagation.TraceContext

// headerCarrier lets the propagator read and write NATS headers. NATS keeps header names
// as sent, so Get finds "traceparent" whatever case the producer wrote it in.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string {
	if v := nats.Header(h).Get(key); v != "" {
		return v
	}
	for k, vs := range h {
		if strings.EqualFold(k, key) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// orNoop is t, or a tracer that records nothing when t is nil.
func orNoop(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer(TracerName)
	}
	return t
}

// startJobSpan continues the trace the job message's headers carry (a new trace when they
// carry none) with the job's span.
func startJobSpan(ctx context.Context, t trace.Tracer, h nats.Header, subject string, attempt int) (context.Context, trace.Span) {
	if h != nil {
		ctx = traceContext.Extract(ctx, headerCarrier(h))
	}
	return t.Start(ctx, SpanJob, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", subject),
		attribute.Int("la.job.attempt", attempt),
	))
}

// endSpan records err, if any, on s and ends it.
func endSpan(s trace.Span, err error) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// chipSpans records the wait for the chip and the device's work as two spans after the
// fact: called is when the job asked for the chip, started when the chip took it up (zero
// when it never did) and returned when the answer came back.
func chipSpans(ctx context.Context, t trace.Tracer, called, started, returned time.Time, batch, tokens int, err error) {
	if started.IsZero() {
		_, wait := t.Start(ctx, SpanChipWait, trace.WithTimestamp(called))
		if err != nil {
			wait.RecordError(err)
			wait.SetStatus(codes.Error, err.Error())
		}
		wait.End(trace.WithTimestamp(returned))
		return
	}
	_, wait := t.Start(ctx, SpanChipWait, trace.WithTimestamp(called))
	wait.End(trace.WithTimestamp(started))
	_, dev := t.Start(ctx, SpanDevice, trace.WithTimestamp(started))
	if err != nil {
		dev.RecordError(err)
		dev.SetStatus(codes.Error, err.Error())
	} else {
		dev.SetAttributes(attribute.Int("la.batch_size", batch), attribute.Int("la.tokens", tokens))
	}
	dev.End(trace.WithTimestamp(returned))
}

// injectTrace adds ctx's trace context to h (for the result message), if it has one.
func injectTrace(ctx context.Context, h nats.Header) {
	traceContext.Inject(ctx, headerCarrier(h))
}
