package jobs

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// gauges gathers reg and returns every sample by series name (labels ignored; the series
// here have one sample each).
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.Gauge != nil:
				out[f.GetName()] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[f.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestQueueCollectorReportsTheQueueDepth: the gauges follow the jobs waiting, the jobs
// handed out and not acknowledged, and the dead-letter records, as JetStream counts them;
// when NATS is gone a scrape leaves them out and counts the failure.
func TestQueueCollectorReportsTheQueueDepth(t *testing.T) {
	ns := natstest.Start(t)
	js, topo := connectTopology(t, ns, testTopology())
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewQueueCollector(topo, time.Second))
	// JetStream updates a consumer's counts just after it acknowledges a publish: wait
	// for them rather than read them once.
	check := func(when string, want map[string]float64) {
		t.Helper()
		var got map[string]float64
		fits := func() bool {
			got = gauges(t, reg)
			for name, v := range want {
				if g, ok := got[name]; !ok || g != v {
					return false
				}
			}
			return true
		}
		for deadline := time.Now().Add(10 * time.Second); !fits() && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if !fits() {
			t.Errorf("%s: %v, want %v", when, got, want)
		}
	}
	check("empty", map[string]float64{"la_queue_pending": 0, "la_queue_ack_pending": 0, "la_dlq_messages": 0, "la_queue_stats_errors_total": 0})

	for _, id := range []string{"q1", "q2", "q3"} {
		b, _ := json.Marshal(Job{ID: id, Image: "s3://images/x.jpg", Query: "dog"})
		if _, err := js.Publish(t.Context(), JobSubject(DefaultClass), b, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	check("three published", map[string]float64{"la_queue_pending": 3, "la_queue_ack_pending": 0})

	msg, err := topo.Consumer.Next(jetstream.FetchMaxWait(5 * time.Second)) // held, not acked
	if err != nil {
		t.Fatal(err)
	}
	check("one held", map[string]float64{"la_queue_pending": 2, "la_queue_ack_pending": 1})
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), DLQSubject("q1"), []byte(`{"id":"q1"}`)); err != nil {
		t.Fatal(err)
	}
	check("one acked, one dead-lettered", map[string]float64{"la_queue_pending": 2, "la_queue_ack_pending": 0, "la_dlq_messages": 1})

	ns.Shutdown()
	got := gauges(t, reg)
	if _, ok := got["la_queue_pending"]; ok || got["la_queue_stats_errors_total"] < 1 {
		t.Errorf("NATS down: %v; want no queue gauges and the failure counted", got)
	}
}

// TestJobSpansContinueTheProducersTrace runs a job with an overlay through a real Runner
// on the simulated chip with an in-memory span exporter: the job's span is a child of the
// span the producer put in the message's traceparent header, every stage has its span
// under it, the chip wait ends where the device time begins, and the published result
// carries the job's trace on.
func TestJobSpansContinueTheProducersTrace(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", photo(t, "dog.jpg"))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })

	// The producer's span, sent as W3C traceparent in the job message's headers.
	producerCtx, producer := tp.Tracer("producer").Start(t.Context(), "submit")
	producer.End()
	msg := &nats.Msg{Subject: JobSubject(DefaultClass), Header: nats.Header{}}
	traceContext.Inject(producerCtx, headerCarrier(msg.Header))
	if msg.Header.Get("traceparent") == "" {
		t.Fatal("the propagator wrote no traceparent header")
	}
	msg.Data, _ = json.Marshal(Job{ID: "traced", Image: img, Query: "dog", Overlay: true})
	results, err := e.js.OrderedConsumer(t.Context(), ResultsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(t.Context(), msg, jetstream.WithMsgID("traced")); err != nil {
		t.Fatal(err)
	}
	cfg := e.runnerConfig("w1")
	cfg.Tracer = tp.Tracer(TracerName)
	r := startRunnerWith(t, e.topo, e.store, openSim(2), cfg)
	result, err := results.Next(jetstream.FetchMaxWait(time.Minute))
	if err != nil {
		t.Fatalf("no result published: %v", err)
	}
	r.stop(t) // the job span ends once the message is settled

	spans := map[string]sdktrace.ReadOnlySpan{}
	var order []string
	for _, s := range rec.Ended() {
		if _, seen := spans[s.Name()]; !seen {
			order = append(order, s.Name())
		}
		spans[s.Name()] = s
	}
	job := spans[SpanJob]
	if job == nil {
		t.Fatalf("no %q span; ended: %v", SpanJob, order)
	}
	if job.Parent().SpanID() != producer.SpanContext().SpanID() || job.SpanContext().TraceID() != producer.SpanContext().TraceID() {
		t.Errorf("job span's parent %v, want the producer's span %v", job.Parent(), producer.SpanContext())
	}
	if job.SpanKind() != trace.SpanKindConsumer || job.Status().Code == codes.Error {
		t.Errorf("job span kind %v status %v", job.SpanKind(), job.Status())
	}
	attrs := map[string]string{}
	for _, kv := range job.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["la.job.id"] != "traced" || attrs["la.job.status"] != "succeeded" || attrs["la.job.settled"] != "ack" {
		t.Errorf("job span attributes %v", attrs)
	}
	for _, name := range []string{SpanFetch, SpanPreprocess, SpanChipWait, SpanDevice, SpanOverlay, SpanUpload, SpanPublish} {
		s := spans[name]
		if s == nil {
			t.Errorf("no %q span; ended: %v", name, order)
			continue
		}
		if s.Parent().SpanID() != job.SpanContext().SpanID() {
			t.Errorf("%q is not a child of the job span", name)
		}
		if s.StartTime().Before(job.StartTime()) || s.EndTime().After(job.EndTime()) {
			t.Errorf("%q [%v, %v] is not within the job's span [%v, %v]", name, s.StartTime(), s.EndTime(), job.StartTime(), job.EndTime())
		}
	}
	if t.Failed() {
		return
	}
	if !spans[SpanChipWait].EndTime().Equal(spans[SpanDevice].StartTime()) {
		t.Errorf("the chip wait ends at %v, the device span starts at %v", spans[SpanChipWait].EndTime(), spans[SpanDevice].StartTime())
	}
	stages := []string{SpanFetch, SpanPreprocess, SpanChipWait, SpanDevice, SpanOverlay}
	for i := 1; i < len(stages); i++ {
		if spans[stages[i]].StartTime().Before(spans[stages[i-1]].EndTime()) {
			t.Errorf("%q starts before %q ends", stages[i], stages[i-1])
		}
	}
	if !slices.Contains(order, SpanPublish) || spans[SpanPublish].StartTime().Before(spans[SpanOverlay].EndTime()) {
		t.Errorf("publish does not follow the overlay")
	}

	// The result message continues the trace: its traceparent names the job's trace.
	var carried trace.SpanContext
	carried = trace.SpanContextFromContext(traceContext.Extract(t.Context(), headerCarrier(result.Headers())))
	if carried.TraceID() != producer.SpanContext().TraceID() {
		t.Errorf("result message traceparent %q, want the trace %v", result.Headers().Get("traceparent"), producer.SpanContext().TraceID())
	}
}

// TestTraceparentHeaderIsFoundInAnyCase: NATS keeps header names as sent; a producer that
// writes Traceparent or TRACEPARENT is still followed.
func TestTraceparentHeaderIsFoundInAnyCase(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, name := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		sc := trace.SpanContextFromContext(traceContext.Extract(t.Context(), headerCarrier(nats.Header{name: {tp}})))
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() {
			t.Errorf("header %q: span context %v", name, sc)
		}
	}
}
