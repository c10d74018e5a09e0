package jobs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
)

// startHealer runs a healer of e's topology until the test ends. Its interval is long, so
// only a nudge (a failed pull or publish) or Check makes it look.
func startHealer(t *testing.T, e *testEnv, m *Metrics) *Healer {
	t.Helper()
	h, err := NewHealer(e.topo, HealerConfig{Interval: time.Hour, OpTimeout: 5 * time.Second, Logger: e.log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := h.Start(ctx)
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func recreatedCount(t *testing.T, m *Metrics, object string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.TopologyRecreated.WithLabelValues(object).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// Defect 4: `$JS.API.CONSUMER.DELETE.LA_JOBS.la-workers` under a running Runner. The
// Runner reports that it cannot pull, the healer recreates the consumer (counted), the
// Runner is ready again and a job published afterwards runs.
func TestDeletedConsumerIsRecreatedAndJobsRunAgain(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	m := NewMetrics(prometheus.NewRegistry())
	h := startHealer(t, e, m)
	cfg := e.runnerConfig("w1")
	cfg.Healer, cfg.Metrics = h, m
	r := startRunner(t, e.topo, e.store, enginetest.New(), cfg)

	e.publishJob(t, Job{ID: "before", Image: img, Query: "dog"})
	if res := e.publishedResult(t, DefaultBatch, "before"); res.Status != StatusSucceeded {
		t.Fatalf("before the deletion: %s %+v", res.Status, res.Error)
	}
	if err := r.Ready(); err != nil {
		t.Fatalf("ready before the deletion: %v", err)
	}
	if err := e.js.DeleteConsumer(t.Context(), JobsStream, ConsumerName); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the runner to say it cannot pull", func() bool { return r.Ready() != nil })
	testwait.Until(t, 20*time.Second, "the runner to pull again", func() bool { return r.Ready() == nil })
	if n := recreatedCount(t, m, ConsumerName); n != 1 {
		t.Errorf("la_topology_recreated_total{object=%q} = %v; want 1", ConsumerName, n)
	}
	if _, err := e.js.Consumer(t.Context(), JobsStream, ConsumerName); err != nil {
		t.Fatalf("consumer not recreated: %v", err)
	}
	e.publishJob(t, Job{ID: "after", Image: img, Query: "dog"})
	if res := e.publishedResult(t, DefaultBatch, "after"); res.Status != StatusSucceeded {
		t.Fatalf("after the deletion: %s %+v", res.Status, res.Error)
	}
	if h.Err() != nil {
		t.Errorf("healer: %v", h.Err())
	}
}

// Defect 4, second half: LA_DLQ deleted. A job that fails for good cannot write its
// dead-letter record; the failed publish has the healer recreate the stream, and the
// record lands on the job's next delivery.
func TestDeletedDLQIsRecreatedAndTheRecordLands(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	m := NewMetrics(prometheus.NewRegistry())
	h := startHealer(t, e, m)
	cfg := e.runnerConfig("w1")
	cfg.Healer, cfg.Metrics = h, m
	startRunner(t, e.topo, e.store, enginetest.New(), cfg)

	if err := e.js.DeleteStream(t.Context(), DLQStream); err != nil {
		t.Fatal(err)
	}
	e.publishJob(t, Job{ID: "lost-image", Image: "s3://images/no-such.jpg", Query: "dog"})
	rec := e.dlqRecord(t, "lost-image")
	if rec == nil || rec.Code != CodeNotFound {
		t.Fatalf("DLQ record %+v; want not_found", rec)
	}
	if n := recreatedCount(t, m, DLQStream); n != 1 {
		t.Errorf("la_topology_recreated_total{object=%q} = %v; want 1", DLQStream, n)
	}
	testwait.Until(t, 10*time.Second, "the job to leave the queue", func() bool { return e.queueDrained(t) })
}

// Every object gone at once (a wiped server): the healers of three workers, checking at
// the same time, recreate all of it with its configuration, none fails, and jobs flow.
func TestHealersRecreateEverythingConcurrently(t *testing.T) {
	cfg := TopologyConfig{AckWait: 20 * time.Second, MaxDeliver: 4, MaxAckPending: 7}
	e := newTestEnv(t, cfg)
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	var healers []*Healer
	var metrics []*Metrics
	for range 3 {
		_, topo := connectTopology(t, e.nats, cfg) // each worker's own handles
		m := NewMetrics(prometheus.NewRegistry())
		h, err := NewHealer(topo, HealerConfig{Interval: time.Hour, OpTimeout: 5 * time.Second, Logger: e.log, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		healers, metrics = append(healers, h), append(metrics, m)
	}
	for _, stream := range []string{JobsStream, ResultsStream, DLQStream, AdvisoryStream} {
		if err := e.js.DeleteStream(t.Context(), stream); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.js.DeleteKeyValue(t.Context(), StateBucket); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(healers))
	for i, h := range healers {
		wg.Go(func() { errs[i] = h.Check(t.Context()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent checks: %v", err)
	}
	for _, object := range []string{JobsStream, ConsumerName, ResultsStream, DLQStream, AdvisoryStream, AdvisoryConsumerName, StateBucket} {
		total := 0.0
		for _, m := range metrics {
			total += recreatedCount(t, m, object)
		}
		if total < 1 {
			t.Errorf("%s: no healer counted recreating it", object)
		}
	}
	cc, err := e.js.Consumer(t.Context(), JobsStream, ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	if c := cc.CachedInfo().Config; c.AckWait != 20*time.Second || c.MaxDeliver != 4 || c.MaxAckPending != 7 {
		t.Errorf("recreated consumer config %+v; want the topology's", c)
	}
	if kv, err := e.js.KeyValue(t.Context(), StateBucket); err != nil {
		t.Errorf("state bucket: %v", err)
	} else if st, err := kv.Status(t.Context()); err != nil || st.TTL() != completeTopology(cfg).StateMaxAge {
		t.Errorf("state bucket status %v, %v; want the topology's TTL", st, err)
	}

	// The handles made before the deletion work on the recreated objects.
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))
	e.publishJob(t, Job{ID: "after-wipe", Image: img, Query: "dog"})
	if res := e.publishedResult(t, DefaultBatch, "after-wipe"); res.Status != StatusSucceeded {
		t.Fatalf("after the wipe: %s %+v", res.Status, res.Error)
	}
	if _, err := e.topo.AdvisoryConsumer.Info(t.Context()); err != nil {
		t.Errorf("advisory consumer handle: %v", err)
	}
}

// A healer that cannot recreate what vanished says so in Err until it can.
func TestHealerErrNamesWhatItCouldNotRecreate(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	h, err := NewHealer(e.topo, HealerConfig{Interval: time.Hour, OpTimeout: 5 * time.Second, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Check(t.Context()); err != nil || h.Err() != nil {
		t.Fatalf("whole topology: %v, %v", err, h.Err())
	}
	if err := e.js.DeleteStream(t.Context(), DLQStream); err != nil {
		t.Fatal(err)
	}
	// Another stream takes LA_DLQ's subjects: LA_DLQ cannot be created while it exists.
	squat, err := e.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "SQUAT", Subjects: []string{DLQSubjectPrefix + ">"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Check(t.Context()); err == nil || h.Err() == nil {
		t.Fatal("a check that could not recreate LA_DLQ reported no error")
	}
	if err := e.js.DeleteStream(t.Context(), squat.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	if err := h.Check(t.Context()); err != nil || h.Err() != nil {
		t.Fatalf("after the subjects were freed: %v, %v", err, h.Err())
	}
}
