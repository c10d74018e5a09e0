package console

import (
	"testing"
	"time"
)

// TestThumbPacer: on an idle worker thumbnails never wait; on a busy one the first
// thumbBurst of thumbnail time goes at once and then each waits so that thumbnails use
// thumbBusyShare of one CPU; a spell of idleness restores the burst.
func TestThumbPacer(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	busy := false
	p := &thumbPacer{share: 0.05, burst: 250 * time.Millisecond, maxWait: time.Hour, credit: 250 * time.Millisecond,
		last: clock, now: func() time.Time { return clock }, busy: func(time.Duration) bool { return busy }}
	step := func(d time.Duration) time.Duration {
		clock = clock.Add(d)
		w := p.spent(d)
		clock = clock.Add(w)
		return w
	}

	for i := range 20 {
		if w := step(40 * time.Millisecond); w != 0 {
			t.Fatalf("idle worker: thumbnail %d waits %v, want 0", i, w)
		}
	}

	busy = true
	var spent, total time.Duration
	start := clock
	for i := range 50 {
		w := step(40 * time.Millisecond)
		spent += 40 * time.Millisecond
		total += w
		if i < 6 && w != 0 { // 6 x 40 ms fit in the burst of 250 ms
			t.Fatalf("busy worker: thumbnail %d within the burst waits %v", i, w)
		}
		if i == 7 && w == 0 {
			t.Fatalf("busy worker: thumbnail %d past the burst does not wait", i)
		}
	}
	share := float64(spent-p.burst) / float64(clock.Sub(start))
	if share > 0.05 || share < 0.045 {
		t.Fatalf("busy worker: thumbnails used %.4f of a CPU beyond the burst, want 0.05", share)
	}

	busy = false
	if w := step(40 * time.Millisecond); w != 0 {
		t.Fatalf("idle again: waits %v", w)
	}
	if p.credit != p.burst {
		t.Fatalf("idle again: credit %v, want the burst %v", p.credit, p.burst)
	}
}

// TestBusyMeter: the process is busy when, since the last call and without the
// thumbnail's own time, it used at least busyFraction of its CPUs.
func TestBusyMeter(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	var cpu time.Duration
	m := newBusyMeter(func() time.Time { return clock }, func() time.Duration { return cpu }, func() int { return 2 })
	for _, c := range []struct {
		wall, cpu, thumb time.Duration
		want             bool
	}{
		{time.Second, 1900 * time.Millisecond, 0, true},                        // both CPUs full
		{time.Second, 600 * time.Millisecond, 0, true},                         // 30 % of two: jobs run beside
		{time.Second, 1400 * time.Millisecond, 1000 * time.Millisecond, false}, // mostly the thumbnail's own time
		{time.Second, 300 * time.Millisecond, 0, false},                        // mostly idle
		{0, 0, 0, false}, // no time passed
	} {
		clock, cpu = clock.Add(c.wall), cpu+c.cpu
		if got := m.busy(c.thumb); got != c.want {
			t.Errorf("wall %v, cpu %v, thumbnail %v: busy %v, want %v", c.wall, c.cpu, c.thumb, got, c.want)
		}
	}
}

// TestThumbPacerCapsOneWait: a huge picture's debt is paid over several capped waits, not
// in one wait that would hold back every thumbnail after it.
func TestThumbPacerCapsOneWait(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	p := &thumbPacer{share: 0.05, burst: 0, maxWait: 2 * time.Second, now: func() time.Time { return clock },
		busy: func(time.Duration) bool { return true }}
	clock = clock.Add(3 * time.Second)
	if w := p.spent(3 * time.Second); w != 2*time.Second { // a 60 s debt
		t.Fatalf("after 3 s of thumbnail: waits %v, want the cap of 2 s", w)
	}
	clock = clock.Add(2 * time.Second)
	if w := p.spent(0); w != 2*time.Second {
		t.Fatalf("with the debt not yet paid: waits %v, want 2 s again", w)
	}
}
