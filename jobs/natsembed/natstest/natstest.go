// Package natstest starts embedded NATS servers with JetStream for tests: random ports,
// stores in t.TempDir(), shut down by t.Cleanup.
package natstest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/jobs/natsembed"
)

// Start runs a JetStream server on a random 127.0.0.1 port until the test ends.
func Start(t testing.TB) *natsembed.Server {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start embedded NATS: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Connect opens a client connection to s that is closed when the test ends.
func Connect(t testing.TB, s *natsembed.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect to %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Cluster is n JetStream servers routed to each other.
type Cluster struct {
	Servers []*natsembed.Server
}

// URLs is the comma-separated client URLs of every node, as LA_NATS_URL takes them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// StartCluster runs an n-node JetStream cluster on 127.0.0.1 until the test ends and
// waits until it has elected a meta leader, so streams can be created at once.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	routeAddrs := make([]string, n)
	routes := make([]string, n)
	for i := range n {
		routeAddrs[i] = freeport.MustAddr(t)
		routes[i] = "nats-route://" + routeAddrs[i]
	}
	c := &Cluster{}
	for i := range n {
		s, err := natsembed.Start(natsembed.Options{
			Listen:     "127.0.0.1:-1",
			StoreDir:   t.TempDir(),
			ServerName: fmt.Sprintf("n%d", i+1),
			Cluster:    natsembed.ClusterOptions{Name: "la-test", Listen: routeAddrs[i], Routes: routes},
		})
		if err != nil {
			t.Fatalf("start cluster node %d: %v", i+1, err)
		}
		t.Cleanup(s.Shutdown)
		c.Servers = append(c.Servers, s)
	}
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := js.AccountInfo(t.Context())
		if err == nil && info != nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster of %d never became ready for JetStream: %v", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
