package natsembed

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStartServesJetStreamAndShutsDown(t *testing.T) {
	s, err := Start(Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(t.Context()); err != nil {
		t.Errorf("JetStream not enabled: %v", err)
	}
	nc.Close()
	s.Shutdown()
	if _, err := nats.Connect(s.ClientURL()); err == nil {
		t.Error("server still accepts connections after Shutdown")
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	if _, err := Start(Options{Listen: "127.0.0.1:0"}); err == nil {
		t.Error("started without a store directory")
	}
	for _, listen := range []string{"no-port", "127.0.0.1:http", "127.0.0.1:70000"} {
		if _, err := Start(Options{Listen: listen, StoreDir: t.TempDir()}); err == nil {
			t.Errorf("listen %q accepted", listen)
		}
	}
}

func TestStartFailsOnAPortInUse(t *testing.T) {
	first, err := Start(Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Shutdown()
	addr := first.NATSServer().Addr().String()
	if s, err := Start(Options{Listen: addr, StoreDir: t.TempDir(), ReadyTimeout: time.Second}); err == nil {
		s.Shutdown()
		t.Errorf("second server on %s started", addr)
	}
}
