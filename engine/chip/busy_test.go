package chip

import (
	"context"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
)

// t0 is the made-up clock's origin; at(s) is s seconds after it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestBusyMeterShowsTheLastWindow: the ratio follows the load of the last minute (busy,
// then idle, then busy again), while the lifetime seconds only grow.
func TestBusyMeterShowsTheLastWindow(t *testing.T) {
	m := newBusyMeter(t0, time.Minute, 60)
	// Busy half of the first minute, in calls of 1.5 s every 3 s.
	for s := 0.0; s < 60; s += 3 {
		m.begin(at(s))
		m.end(at(s + 1.5))
	}
	near(t, "ratio after a half-busy minute", m.ratio(at(59.5)), 30/59.5)
	near(t, "seconds after a half-busy minute", m.seconds(at(60)).Seconds(), 30)

	// A minute of nothing: the ratio falls to 0, the lifetime total stays.
	near(t, "ratio after an idle minute", m.ratio(at(120)), 0)
	near(t, "seconds after an idle minute", m.seconds(at(120)).Seconds(), 30)

	// One long call from 120 s: it counts while it runs, not only when it ends.
	// (The window starts at a whole bucket: at 150 s it is [91 s, 150 s].)
	m.begin(at(120))
	near(t, "ratio half a minute into a long call", m.ratio(at(150)), 30.0/59)
	near(t, "seconds half a minute into a long call", m.seconds(at(150)).Seconds(), 60)
	m.end(at(180))
	near(t, "ratio after a busy minute", m.ratio(at(180)), 1)
	near(t, "seconds after a busy minute", m.seconds(at(180)).Seconds(), 90)
	// Half a minute later, half of the window is that call.
	near(t, "ratio half a minute after", m.ratio(at(210)), (180.0-151)/59)
}

// TestBusyMeterYoungerThanTheWindow: a chip open for 10 s and busy for 5 of them is half
// busy, not a twelfth.
func TestBusyMeterYoungerThanTheWindow(t *testing.T) {
	m := newBusyMeter(t0, time.Minute, 60)
	near(t, "ratio at the start", m.ratio(t0), 0)
	m.begin(at(2))
	m.end(at(7))
	near(t, "ratio", m.ratio(at(10)), 0.5)
}

// TestBusyMeterCallLongerThanTheRing: a ten-minute call fills the window and is counted
// whole in the lifetime total, without touching a bucket twice.
func TestBusyMeterCallLongerThanTheRing(t *testing.T) {
	m := newBusyMeter(t0, time.Minute, 60)
	m.begin(at(5.5))
	m.end(at(605.5))
	near(t, "ratio", m.ratio(at(605.5)), 1)
	near(t, "seconds", m.seconds(at(700)).Seconds(), 600)
	near(t, "ratio a minute later", m.ratio(at(666)), 0)
}

// TestChipCountsTokensAndDeviceTime runs real requests through the real pipeline on a
// chip, one at a time and batched: the chip's token count is the sum of the answers'
// tokens, its device time is positive and no more than the wall time, and GenerateTimed
// says when the device took each request up.
func TestChipCountsTokensAndDeviceTime(t *testing.T) {
	img, err := os.ReadFile("../../testdata/images/dog.jpg")
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{1, 3} {
		o := pipeline.OpenOptions{Settings: engine.Settings{Backend: "cpu", Threads: 2, MaxSeqLen: 512, InTokenLimit: 64, CanonGrid: "native", MaxNewTokens: 6, MaxNewTokensCap: 64, MaxBatch: batch}, WeightsDir: "../../testdata/checkpoints/tiny-f32"}
		opened := time.Now()
		c, err := Open(func() (engine.Engine, error) { return pipeline.Open(o) })
		if err != nil {
			t.Fatal(err)
		}
		if c.GeneratedTokens() != 0 || c.BusySeconds() != 0 || c.BusyRatio() != 0 {
			t.Fatalf("batch %d: a fresh chip reports %d tokens, %v s busy, ratio %v", batch, c.GeneratedTokens(), c.BusySeconds(), c.BusyRatio())
		}
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			tokens int
		)
		for i, budget := range []int{3, 6, 5} {
			wg.Go(func() {
				prep, err := c.Engine().Prepare(context.Background(), engine.Request{Image: img, Query: "dog", MaxNewTokens: budget})
				if err != nil {
					t.Error(err)
					return
				}
				called := time.Now()
				pred, started, err := c.GenerateTimed(context.Background(), Priority(i%2), prep)
				returned := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				if started.Before(called) || started.After(returned) {
					t.Errorf("started %v is not between the call %v and its return %v", started, called, returned)
				}
				mu.Lock()
				tokens += pred.NumGeneratedTokens
				mu.Unlock()
			})
		}
		wg.Wait()
		wall := time.Since(opened).Seconds()
		if got := c.GeneratedTokens(); got != uint64(tokens) || tokens == 0 {
			t.Errorf("batch %d: the chip counted %d tokens, the answers hold %d", batch, got, tokens)
		}
		if busy := c.BusySeconds(); busy <= 0 || busy > wall {
			t.Errorf("batch %d: %v s of device time in %v s", batch, busy, wall)
		}
		if r := c.BusyRatio(); r <= 0 || r > 1 {
			t.Errorf("batch %d: busy ratio %v right after the work", batch, r)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
