package native

import "testing"

// TestPoolRunsEveryTaskOnEveryThread drives the pool's two ways of waiting (sleeping, and
// spinning inside a burst) and the switches between them: every thread must run every
// task exactly once, and cpu_pool_run must return only after all of them have. A lost
// wake-up shows as a hang (the test's timeout), a skipped or early task as a count.
func TestPoolRunsEveryTaskOnEveryThread(t *testing.T) {
	for _, c := range []struct {
		threads, tasks, burstEvery int
	}{
		{1, 1000, 7},
		{2, 20000, 0},
		{2, 20000, 1},
		{2, 20000, 13},
		{4, 5000, 5},
		{4, 5000, 0},
	} {
		if got := poolProbe(c.threads, c.tasks, c.burstEvery); got != 0 {
			t.Errorf("%d threads, %d tasks, bursts of %d: %d misses", c.threads, c.tasks, c.burstEvery, got)
		}
	}
}
