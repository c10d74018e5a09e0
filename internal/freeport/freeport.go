// Package freeport finds loopback TCP addresses for servers a test starts: the kernel picks
// a free port, the listener closes, and the address is handed on. Another process may take
// the port in between; tests that start servers retry or fail clearly when that happens.
package freeport

import (
	"fmt"
	"net"
	"strconv"
	"testing"
)

// Addr is a 127.0.0.1:port address that was free a moment ago.
func Addr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// MustAddr is Addr for tests: it fails the test instead of returning an error.
func MustAddr(t testing.TB) string {
	t.Helper()
	addr, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// MustPort is the port of MustAddr.
func MustPort(t testing.TB) int {
	t.Helper()
	_, port, err := net.SplitHostPort(MustAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
