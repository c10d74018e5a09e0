package jobs

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

func TestEnsureTopologyAppliesConfigAndIsIdempotent(t *testing.T) {
	s := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	cfg := completeTopology(TopologyConfig{
		DuplicateWindow: time.Minute, ResultsMaxAge: time.Hour, AckWait: 20 * time.Second,
		MaxDeliver: 4, BackOff: []time.Duration{20 * time.Second, time.Minute}, MaxAckPending: 7,
	})
	first, err := EnsureTopology(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.State.Put(t.Context(), "kept", State{Status: StatusQueued}); err != nil {
		t.Fatal(err)
	}
	again, err := EnsureTopology(t.Context(), js, cfg)
	if err != nil {
		t.Fatalf("second EnsureTopology: %v", err)
	}
	if _, ok, err := again.State.Get(t.Context(), "kept"); err != nil || !ok {
		t.Errorf("state lost by a second EnsureTopology: ok=%v err=%v", ok, err)
	}

	jobsInfo := again.Jobs.CachedInfo()
	if jobsInfo.Config.Retention != jetstream.WorkQueuePolicy || jobsInfo.Config.Storage != jetstream.FileStorage ||
		jobsInfo.Config.Duplicates != time.Minute || jobsInfo.Config.Subjects[0] != "la.jobs.>" {
		t.Errorf("LA_JOBS config %+v", jobsInfo.Config)
	}
	if c := again.Results.CachedInfo().Config; c.Retention != jetstream.LimitsPolicy || c.MaxAge != time.Hour {
		t.Errorf("LA_RESULTS config %+v", c)
	}
	if c := again.DLQ.CachedInfo().Config; c.Retention != jetstream.LimitsPolicy || c.Subjects[0] != "la.dlq.>" {
		t.Errorf("LA_DLQ config %+v", c)
	}
	cc := again.Consumer.CachedInfo().Config
	if cc.Durable != ConsumerName || cc.AckPolicy != jetstream.AckExplicitPolicy || cc.MaxDeliver != 4 ||
		cc.MaxAckPending != 7 || len(cc.BackOff) != 2 {
		t.Errorf("consumer config %+v", cc)
	}
}

func TestTopologyConfigRejectsBadSettings(t *testing.T) {
	for name, cfg := range map[string]TopologyConfig{
		"replicas":          {Replicas: 7},
		"ack wait":          {AckWait: time.Millisecond},
		"back-off":          {MaxDeliver: 2, BackOff: []time.Duration{time.Second, time.Second}},
		"max pending":       {MaxAckPending: -1},
		"dedupe > age":      {DuplicateWindow: time.Hour, JobsMaxAge: time.Minute},
		"negative jobs age": {JobsMaxAge: -time.Second},
	} {
		if err := completeTopology(cfg).Validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, cfg)
		}
	}
	if err := completeTopology(TopologyConfig{}).Validate(); err != nil {
		t.Errorf("a complete configuration rejected: %v", err)
	}
	// No setting falls back to a default of its own: a zero one is refused.
	if err := (TopologyConfig{}).Validate(); err == nil {
		t.Error("an empty configuration was accepted")
	}
}
