package worker

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// TestTopologyWaitsForJetStreamToAnswer: a server whose JetStream does not answer the
// connection yet ("no responders", what an account registered for two connections at once
// gives the second one for a moment: the cause of the flaky
// TestWorkerAgainstSecuredServers/creds) holds the start until it does; one that never
// does ends it after the wait, saying so.
func TestTopologyWaitsForJetStreamToAnswer(t *testing.T) {
	srv := natstest.StartServer(t, nil) // JetStream off: every API request finds no responders
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig(t).Topology
	log := slog.New(slog.DiscardHandler)

	_, err = ensureTopologyAtStart(t.Context(), js, cfg, 300*time.Millisecond, log)
	if err == nil || !strings.Contains(err.Error(), "JetStream did not answer within 300ms (LA_NATS_TIMEOUT)") {
		t.Fatalf("JetStream that never answers: %v; want the start to end, saying why", err)
	}

	store := t.TempDir()
	time.AfterFunc(300*time.Millisecond, func() {
		if err := srv.EnableJetStream(&server.JetStreamConfig{StoreDir: store}); err != nil {
			t.Errorf("enable JetStream: %v", err)
		}
	})
	topo, err := ensureTopologyAtStart(t.Context(), js, cfg, 30*time.Second, log)
	if err != nil {
		t.Fatalf("JetStream that answers after a moment: %v", err)
	}
	if topo.Jobs == nil || topo.State == nil {
		t.Fatalf("topology %+v", topo)
	}
	if _, err := js.Consumer(t.Context(), jobs.JobsStream, jobs.ConsumerName); err != nil {
		t.Errorf("the consumer: %v", err)
	}
}
