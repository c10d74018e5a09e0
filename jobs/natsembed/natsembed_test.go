package natsembed

import (
	"net"
	"strings"
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
	// The refusal is immediate (not after ReadyTimeout) and says why.
	began := time.Now()
	s, err := Start(Options{Listen: addr, StoreDir: t.TempDir(), ReadyTimeout: 10 * time.Second})
	if err == nil {
		s.Shutdown()
		t.Fatalf("second server on %s started", addr)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("refusing a port in use took %s; want it at once, not after the ready timeout", took)
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %q: want the address and the cause (address already in use)", err)
	}
}

func TestStartFailsOnAClusterPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	began := time.Now()
	s, err := Start(Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), ServerName: "n1",
		Cluster: ClusterOptions{Name: "c", Listen: taken.Addr().String()}})
	if err == nil {
		s.Shutdown()
		t.Fatalf("server started with its route port %s taken", taken.Addr())
	}
	if took := time.Since(began); took > 2*time.Second || !strings.Contains(err.Error(), "cluster listen address "+taken.Addr().String()) {
		t.Errorf("after %s: %v; want an immediate error naming the cluster address", took, err)
	}
}
