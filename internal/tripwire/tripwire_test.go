package tripwire

import (
	"net"
	"testing"
)

// recorder keeps what NoConnection reports instead of failing the test.
type recorder struct {
	testing.TB
	errors int
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }

// TestNoConnectionSeesADial: quiet, NoConnection passes; after a dial, it fails.
func TestNoConnectionSeesADial(t *testing.T) {
	l := New(t)
	r := &recorder{TB: t}
	l.NoConnection(r, "the test address")
	if r.errors != 0 {
		t.Fatal("a listener nobody dialled reported a connection")
	}
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	l.NoConnection(r, "the test address")
	if r.errors != 1 {
		t.Fatal("a dial was not reported")
	}
}
