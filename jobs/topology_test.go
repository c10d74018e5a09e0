package jobs

import (
	"strings"
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

func TestCheckServerVersionComparesWithTheMinimum(t *testing.T) {
	// A pre-release of the minimum (2.10.0-beta.1) comes before it.
	for v, ok := range map[string]bool{
		"2.10.0": true, "2.10.7": true, "2.11.0": true, "2.15.3": true, "3.0.0": true, "v2.12.1": true,
		"2.10.1-RC.1": true, "2.10.0+build.5": true,
		"2.9.10": false, "2.9.25": false, "2.2.0": false, "1.99.99": false, "2.10.0-beta.1": false,
		"": false, "2.10": false, "two.ten.zero": false, "2.10.0 ": false,
	} {
		err := CheckServerVersion(v)
		if (err == nil) != ok {
			t.Errorf("%q: error %v; want accepted %v", v, err, ok)
		}
		if err != nil && (!strings.Contains(err.Error(), MinServerVersion) || !strings.Contains(err.Error(), v)) {
			t.Errorf("%q: error %q does not name the version found and the one required", v, err)
		}
	}
}

func TestEnsureTopologyChecksTheServerVersion(t *testing.T) {
	s := natstest.Start(t)
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	found := nc.ConnectedServerVersion()
	if err := CheckServerVersion(found); err != nil {
		t.Fatalf("the embedded server is refused: %v", err)
	}
	if _, err := EnsureTopology(t.Context(), js, completeTopology(TopologyConfig{})); err != nil {
		t.Fatalf("EnsureTopology on the embedded nats-server %s: %v", found, err)
	}
	// A connection that is gone announces no version: refused with the reason, not a panic.
	nc.Close()
	_, err = EnsureTopology(t.Context(), js, completeTopology(TopologyConfig{}))
	if err == nil || !strings.Contains(err.Error(), MinServerVersion) {
		t.Errorf("EnsureTopology over a closed connection: %v; want the version check to refuse it", err)
	}
}
