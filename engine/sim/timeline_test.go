package sim

import (
	"testing"
	"time"
)

// fakeClock is a clock whose sleeps wake a set time late.
type fakeClock struct {
	t    time.Time
	late time.Duration // added to every sleep
}

func (c *fakeClock) now() time.Time        { return c.t }
func (c *fakeClock) sleep(d time.Duration) { c.t = c.t.Add(d + c.late) }
func (c *fakeClock) work(d time.Duration)  { c.t = c.t.Add(d) }
func (c *fakeClock) at(ms float64) time.Time {
	return time.Time{}.Add(time.Duration(ms * float64(time.Millisecond)))
}

// TestTimelineForgivesOnlyTheWakeUp: the lateness of a wake is not device time, the host's
// gap before the next call is, steps never overlap, and no more than a step's cost is
// forgiven.
func TestTimelineForgivesOnlyTheWakeUp(t *testing.T) {
	c := &fakeClock{late: 3 * time.Millisecond}
	tl := timeline{now: c.now, sleep: c.sleep}
	ms := time.Millisecond

	// A 10 ms step from 0 ends on the device at 10; the thread wakes at 13.
	end := tl.begin(10 * ms)
	if got := tl.end(end, 10*ms); got != 3*ms || c.t != c.at(13) {
		t.Fatalf("first step: forgave %s, woke at %s; want 3ms at 13ms", got, c.t.Sub(time.Time{}))
	}
	// The host works 1 ms and calls again at 14: the device is idle from 10 to 11 (the
	// host's millisecond) and the step runs 11 to 21; the thread, 3 ms late again, wakes at 24.
	c.work(ms)
	end = tl.begin(10 * ms)
	if end != c.at(21) {
		t.Fatalf("second step ends at %s on the device, want 21ms", end.Sub(time.Time{}))
	}
	tl.end(end, 10*ms)
	if c.t != c.at(24) {
		t.Fatalf("woke at %s, want 24ms", c.t.Sub(time.Time{}))
	}

	// A wake later than the step's cost is forgiven only up to the cost.
	c.late, tl.lag = 50*ms, 0
	end = tl.begin(2 * ms)
	if got := tl.end(end, 2*ms); got != 2*ms {
		t.Errorf("a 50 ms late wake after a 2 ms step: forgave %s, want 2ms", got)
	}

	// Host-side work longer than the step: no sleep, and the overrun is carried like
	// lateness.
	c.late = 0
	tl.lag = 0
	end = tl.begin(5 * ms)
	before := c.t
	c.work(8 * ms)
	if got := tl.end(end, 5*ms); got != 3*ms || c.t != before.Add(8*ms) {
		t.Errorf("an 8 ms step of work on a 5 ms step: forgave %s, slept %s; want 3ms and no sleep", got, c.t.Sub(before)-8*ms)
	}
}
