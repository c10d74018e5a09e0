// Package tripwire is a TCP listener for tests that must show a command contacted
// nothing: it accepts and closes every connection and remembers that one came.
package tripwire

import (
	"net"
	"testing"
	"time"
)

// Listener listens on a loopback port until the test ends.
type Listener struct {
	ln        net.Listener
	connected chan struct{}
}

// New starts a listener on 127.0.0.1; it is closed, and its goroutine waited for, when the
// test ends.
func New(t testing.TB) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{ln: ln, connected: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case l.connected <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return l
}

// Addr is the listener's host:port.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// NoConnection fails the test if anything connected, waiting a moment for a late dial;
// what names the address in the message ("the NATS address").
func (l *Listener) NoConnection(t testing.TB, what string) {
	t.Helper()
	select {
	case <-l.connected:
		t.Errorf("something connected to %s", what)
	case <-time.After(200 * time.Millisecond):
	}
}
