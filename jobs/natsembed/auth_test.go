package natsembed

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/locateanything/detect/internal/pkitest"
)

// TestNetworkListenNeedsAuthentication: a server reachable from the network lets whoever
// publishes a job make the worker read and write files, so it must authenticate clients.
func TestNetworkListenNeedsAuthentication(t *testing.T) {
	ca := pkitest.NewCA(t, "la-test")
	serverOnly := pkitest.ServerTLS(t, ca.Server(t, "nats"), nil)
	mutual := pkitest.ServerTLS(t, ca.Server(t, "nats"), ca)
	for _, listen := range []string{"0.0.0.0:-1", ":-1", "[::]:-1"} {
		for name, o := range map[string]Options{
			"none":            {},
			"server TLS only": {TLS: serverOnly},
		} {
			o.Listen, o.StoreDir = listen, t.TempDir()
			s, err := Start(o)
			if err == nil {
				s.Shutdown()
				t.Errorf("%s with %s: started", listen, name)
			} else if !strings.Contains(err.Error(), "not on the loopback interface") {
				t.Errorf("%s with %s: %v; want a refusal explaining why", listen, name, err)
			}
		}
	}
	for name, o := range map[string]Options{
		"user":       {User: "la", Password: "pw"},
		"token":      {Token: "tok"},
		"mutual TLS": {TLS: mutual},
	} {
		o.Listen, o.StoreDir = "0.0.0.0:-1", t.TempDir()
		s, err := Start(o)
		if err != nil {
			t.Errorf("%s on 0.0.0.0: %v", name, err)
			continue
		}
		s.Shutdown()
	}
}

func TestStartRefusesContradictoryAuth(t *testing.T) {
	for name, o := range map[string]Options{
		"user without password": {User: "la"},
		"password without user": {Password: "pw"},
		"user and token":        {User: "la", Password: "pw", Token: "tok"},
	} {
		o.Listen, o.StoreDir = "127.0.0.1:-1", t.TempDir()
		if s, err := Start(o); err == nil {
			s.Shutdown()
			t.Errorf("%s: started", name)
		}
	}
	if s, err := Start(Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), ServerName: "n1",
		Cluster: ClusterOptions{Name: "c", Listen: "0.0.0.0:6222"}}); err == nil {
		s.Shutdown()
		t.Error("a cluster node listened for routes on 0.0.0.0: routes are not authenticated")
	}
}

// TestInProcessConnectionAuthenticates: the worker's own connection skips the network
// (and TLS) with the server's credentials; clients over the network need TLS, a client
// certificate and the credentials.
func TestInProcessConnectionAuthenticates(t *testing.T) {
	ca := pkitest.NewCA(t, "la-test")
	s, err := Start(Options{Listen: "0.0.0.0:-1", StoreDir: t.TempDir(), User: "la", Password: "pw",
		TLS: pkitest.ServerTLS(t, ca.Server(t, "nats"), ca)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if !strings.HasPrefix(s.ClientURL(), "tls://") {
		t.Errorf("client URL %s: want tls://", s.ClientURL())
	}
	nc, err := nats.Connect("", nats.InProcessServer(s), nats.UserInfo("la", "pw"))
	if err != nil {
		t.Fatalf("in-process with the right password: %v", err)
	}
	nc.Close()
	// (A refused in-process client is not tried here: nats-server then blocks on the pipe
	// for its 10 s write deadline. The worker's own connection carries the credentials the
	// server was given, so it is never refused.)

	// Over the network, TLS and a client certificate are required as well.
	if nc, err := nats.Connect(strings.Replace(s.ClientURL(), "0.0.0.0", "127.0.0.1", 1),
		nats.UserInfo("la", "pw"), nats.RootCAs(ca.File)); err == nil {
		nc.Close()
		t.Error("over the network without a client certificate: connected")
	}
}
