package console

import (
	"runtime"
	"time"
)

// A thumbnail's decode is Go code for PNG, GIF and WebP (libjpeg-turbo only for JPEG): while
// it runs it holds one of the Go scheduler's GOMAXPROCS processors, which the thread's nice
// value cannot take back, so on a busy worker it takes its full turn from the jobs' host
// work (measured: a 1080p PNG overlay costs 70-200 ms, and a browser on a host-bound
// worker took a fifth of its jobs/s). The thumbnail goroutine therefore paces itself while
// the rest of the worker is busy: after each thumbnail it waits long enough that, over
// time, thumbnails use at most thumbBusyShare of one CPU; a credit of thumbBurst lets a
// page's first thumbnails come at once. On an idle worker it does not wait.
const (
	thumbBusyShare = 0.05                   // of one CPU, while the worker is busy
	thumbBurst     = 250 * time.Millisecond // of thumbnail CPU time, spent before pacing starts
	// thumbMaxWait caps one wait, so that a huge picture's thumbnail does not hold back the
	// next for a minute, and a worker that went idle meanwhile is noticed at the next one;
	// the debt left over is paid by the waits after it.
	thumbMaxWait = 2 * time.Second
	// busyFraction: the worker is busy when the rest of the process (the thumbnails' own
	// CPU time left out) used at least this share of its GOMAXPROCS CPUs since the last
	// thumbnail: jobs are being processed beside it.
	busyFraction = 0.25
)

// thumbPacer decides how long the thumbnail goroutine waits after a thumbnail. It is used
// by that goroutine alone.
type thumbPacer struct {
	share   float64
	burst   time.Duration
	maxWait time.Duration
	credit  time.Duration // thumbnail time that may still be spent without waiting (negative: a debt)
	last    time.Time     // when credit was last brought up to date
	now     func() time.Time

	// busy says whether the rest of the process kept the CPUs busy since its last call,
	// leaving out spent, the thumbnail goroutine's own time.
	busy func(spent time.Duration) bool
}

func newThumbPacer() *thumbPacer {
	p := &thumbPacer{share: thumbBusyShare, burst: thumbBurst, maxWait: thumbMaxWait, credit: thumbBurst, now: time.Now}
	p.last = p.now()
	p.busy = newBusyMeter(p.now, processCPUTime, func() int { return runtime.GOMAXPROCS(0) }).busy
	return p
}

// spent records a thumbnail that took d of CPU time and returns how long to wait before
// the next.
func (p *thumbPacer) spent(d time.Duration) time.Duration {
	now := p.now()
	p.credit = min(p.burst, p.credit+time.Duration(float64(now.Sub(p.last))*p.share))
	p.last = now
	if !p.busy(d) {
		p.credit = p.burst // an idle worker: no debt carried into a busy spell
		return 0
	}
	p.credit -= d
	if p.credit >= 0 {
		return 0
	}
	// Waiting w earns w*share of credit: wait until the debt is paid, or thumbMaxWait.
	return min(p.maxWait, time.Duration(float64(-p.credit)/p.share))
}

// busyMeter compares the process's CPU time (cpu) with the wall time between calls and
// the CPUs the process may use (procs: GOMAXPROCS, which the runtime changes when the
// container's CPU limit does).
type busyMeter struct {
	now      func() time.Time
	cpu      func() time.Duration
	procs    func() int
	lastWall time.Time
	lastCPU  time.Duration
}

func newBusyMeter(now func() time.Time, cpu func() time.Duration, procs func() int) *busyMeter {
	return &busyMeter{now: now, cpu: cpu, procs: procs, lastWall: now(), lastCPU: cpu()}
}

func (m *busyMeter) busy(spent time.Duration) bool {
	wall, cpu := m.now(), m.cpu()
	elapsed, used := wall.Sub(m.lastWall), cpu-m.lastCPU-spent
	m.lastWall, m.lastCPU = wall, cpu
	return elapsed > 0 && cpu > 0 && float64(used) >= busyFraction*float64(m.procs())*float64(elapsed)
}
