package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	checks := 0
	Until(t, time.Minute, "three increments", func() bool { checks++; return n.Load() == 3 })
	if checks == 0 {
		t.Fatal("the condition was never checked")
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and returns.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestUntilFailsNamingWhatItWaitedFor(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	start := time.Now()
	checks := 0
	Until(rec, 30*time.Millisecond, "the moon", func() bool { checks++; return false })
	if !strings.Contains(rec.msg, "the moon") || !strings.Contains(rec.msg, "30ms") {
		t.Fatalf("failure %q does not name the condition and the limit", rec.msg)
	}
	if elapsed := time.Since(start); elapsed < 30*time.Millisecond {
		t.Fatalf("gave up after %s, before the limit", elapsed)
	}
	if checks < 2 {
		t.Fatalf("checked %d times in 30 ms; want it polled more than once", checks)
	}
}
