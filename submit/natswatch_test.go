package submit

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs/natsembed"
)

// TestRunSaysWhenNATSIsLostAndBack: a real NATS server goes away under a run's connection
// and comes back on the same address; the run says so once when it is lost (and its
// progress line says how long), once when it is back, and nothing in between.
func TestRunSaysWhenNATSIsLostAndBack(t *testing.T) {
	store := t.TempDir()
	srv, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var said strings.Builder
	prog := &progress{w: &said}
	r := &batchRun{env: Env{JS: js}}

	r.watchNATS(prog)
	if said.Len() != 0 {
		t.Fatalf("said %q while connected", said.String())
	}
	srv.Shutdown()
	testwait.Until(t, 30*time.Second, "the client to notice", func() bool { return nc.Status() != nats.CONNECTED })
	r.watchNATS(prog)
	r.watchNATS(prog)
	if got := said.String(); strings.Count(got, "NATS connection lost") != 1 || strings.Contains(got, "connection back") {
		t.Errorf("after the server went away: %q; want one line saying the connection is lost", got)
	}
	if line := r.snapshot(false).line(); !strings.Contains(line, "NATS connection lost 1s ago") {
		t.Errorf("progress line %q, want it to say NATS is lost", line)
	}

	srv, err = natsembed.Start(natsembed.Options{Listen: strings.TrimPrefix(url, "nats://"), StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	testwait.Until(t, 30*time.Second, "the client to reconnect", func() bool { return nc.Status() == nats.CONNECTED })
	r.watchNATS(prog)
	r.watchNATS(prog)
	if got := said.String(); strings.Count(got, "NATS connection back after") != 1 || strings.Count(got, "connection lost") != 1 {
		t.Errorf("after the server came back: %q; want one more line saying it is back", got)
	}
	if line := r.snapshot(false).line(); strings.Contains(line, "NATS") {
		t.Errorf("progress line %q once NATS is back", line)
	}
}
