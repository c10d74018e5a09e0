package chip

import "time"

// BusyWindow is how far back BusyRatio looks, in busyBuckets steps: long enough to smooth
// over the gaps between two batches, short enough to show the load of the last minute.
const BusyWindow = time.Minute

const busyBuckets = 60

// busyMeter is a chip's device time, kept two ways: the lifetime total, which only grows
// (a counter Prometheus can rate over any range), and the device time per bucket of the
// last window, a ring, for the ratio of the last minute. A call still in flight counts up
// to now, so a long Generate shows as busy while it runs rather than all at once when it
// ends. The caller passes the times in (the Chip passes time.Now, tests a made-up clock)
// and guards the meter with its own mutex.
type busyMeter struct {
	origin time.Time     // bucket 0 starts here
	width  time.Duration // of one bucket
	total  time.Duration // device time of the calls that have ended
	since  time.Time     // start of the call in flight; zero when none is
	sums   []time.Duration
	nums   []int64 // the bucket number whose time sums[i] holds; -1 for none yet
}

func newBusyMeter(origin time.Time, window time.Duration, buckets int) *busyMeter {
	m := &busyMeter{origin: origin, width: window / time.Duration(buckets),
		sums: make([]time.Duration, buckets), nums: make([]int64, buckets)}
	for i := range m.nums {
		m.nums[i] = -1
	}
	return m
}

// bucket is the number of the bucket holding t.
func (m *busyMeter) bucket(t time.Time) int64 { return int64(t.Sub(m.origin) / m.width) }

// start is when bucket b begins.
func (m *busyMeter) start(b int64) time.Time { return m.origin.Add(time.Duration(b) * m.width) }

// begin marks the start of a device call.
func (m *busyMeter) begin(now time.Time) { m.since = now }

// end closes the call in flight: its time goes to the total and to the buckets it covers.
func (m *busyMeter) end(now time.Time) {
	from := m.since
	m.since = time.Time{}
	if from.IsZero() || !now.After(from) {
		return
	}
	m.total += now.Sub(from)
	last := m.bucket(now)
	for b := max(m.bucket(from), last-int64(len(m.sums))+1); b <= last; b++ {
		lo, hi := later(from, m.start(b)), earlier(now, m.start(b+1))
		if hi.After(lo) {
			m.add(b, hi.Sub(lo))
		}
	}
}

// add puts d into bucket b, first emptying the ring entry if it still holds an older bucket.
func (m *busyMeter) add(b int64, d time.Duration) {
	i := b % int64(len(m.sums))
	if m.nums[i] != b {
		m.nums[i], m.sums[i] = b, 0
	}
	m.sums[i] += d
}

// seconds is the device time since the origin, the call in flight included up to now.
func (m *busyMeter) seconds(now time.Time) time.Duration {
	d := m.total
	if !m.since.IsZero() && now.After(m.since) {
		d += now.Sub(m.since)
	}
	return d
}

// ratio is the fraction of the last window spent in device calls: the device time in the
// window's buckets (the current one up to now) over the time they span, which is less
// than the window while the meter is younger than it.
func (m *busyMeter) ratio(now time.Time) float64 {
	cur := m.bucket(now)
	first := max(cur-int64(len(m.sums))+1, 0)
	from := m.start(first)
	span := now.Sub(from)
	if span <= 0 {
		return 0
	}
	var busy time.Duration
	for b := first; b <= cur; b++ {
		if i := b % int64(len(m.sums)); m.nums[i] == b {
			busy += m.sums[i]
		}
	}
	if !m.since.IsZero() && now.After(m.since) {
		busy += now.Sub(later(m.since, from))
	}
	return min(float64(busy)/float64(span), 1)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
