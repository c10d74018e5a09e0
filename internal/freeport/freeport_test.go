package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrCanBeListenedOn: the address is on loopback and free to listen on.
func TestAddrCanBeListenedOn(t *testing.T) {
	addr := MustAddr(t)
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("address %q: host %q, %v", addr, host, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
	port := MustPort(t)
	if port <= 0 || port > 65535 {
		t.Fatalf("port %d", port)
	}
	ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on port %d: %v", port, err)
	}
	ln.Close()
}
