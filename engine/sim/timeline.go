package sim

import "time"

// timeline keeps the simulated device's time. Each step lasts exactly its cost on the
// device; the calling thread sleeps until the step ends (it never spins, so the device
// costs the host no CPU), and the host-side work of the step (hashing the patches,
// planning the answer) runs inside the step's time, before the sleep.
//
// A sleeping thread wakes late: a tenth of a millisecond on an idle machine, many
// milliseconds on one whose CPUs are oversubscribed (a shared CI runner). That lateness is
// the simulation's, not the device's: a chip finishes its step on time, and a dedicated
// host's driver thread sees it at once. So the timeline forgives it: the next step is
// taken to have been issued that much earlier, as the host would have issued it had the
// thread woken on time. Only the lateness of the wake itself is forgiven, at most one
// step's cost; the time the host then takes before calling again (the pipeline's own work)
// is the device's idle time, as on a chip. Steps never overlap and each lasts its cost, so
// the device never runs faster than the model says.
type timeline struct {
	now   func() time.Time
	sleep func(time.Duration) // blocks the thread; sleepFor in production

	lag time.Duration // how late the thread woke from the last step (forgiven part)
}

// begin starts a step of the given cost and returns when it ends on the device: now,
// less the forgiven lateness of the last wake, plus the cost.
func (t *timeline) begin(cost time.Duration) (end time.Time) {
	return t.now().Add(cost - t.lag)
}

// end sleeps until the step's end and returns the lateness forgiven (carried to the next
// step): how late the thread woke, at most the step's cost.
func (t *timeline) end(stepEnd time.Time, cost time.Duration) time.Duration {
	if d := stepEnd.Sub(t.now()); d > 0 {
		t.sleep(d)
	}
	t.lag = min(max(t.now().Sub(stepEnd), 0), cost)
	return t.lag
}
