// Package natstest starts embedded NATS servers with JetStream for tests: random ports,
// store in t.TempDir(), shut down by t.Cleanup.
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"

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
