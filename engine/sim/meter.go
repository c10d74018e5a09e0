package sim

import (
	"sync/atomic"
	"time"
)

// Meter adds up what simulated devices did: their busy time (the modelled cost of every
// step, the time the chip would have spent computing) and their decode steps. One Meter
// may serve one chip or several; its methods are safe for concurrent use, so a load test
// reads it while the chips run.
type Meter struct {
	busy  atomic.Int64 // nanoseconds
	steps atomic.Int64 // decode calls
	rows  atomic.Int64 // sequences advanced by them
	seqs  atomic.Int64 // prefills
}

// MeterReading is a Meter at one moment.
type MeterReading struct {
	Busy      time.Duration // device time
	Sequences int64         // prefills run
	Steps     int64         // decode steps run
	Rows      int64         // sequences those steps advanced, summed
}

// Read returns the totals so far.
func (m *Meter) Read() MeterReading {
	return MeterReading{
		Busy: time.Duration(m.busy.Load()), Sequences: m.seqs.Load(),
		Steps: m.steps.Load(), Rows: m.rows.Load(),
	}
}

// Sub is what happened between an earlier reading and r.
func (r MeterReading) Sub(earlier MeterReading) MeterReading {
	return MeterReading{
		Busy: r.Busy - earlier.Busy, Sequences: r.Sequences - earlier.Sequences,
		Steps: r.Steps - earlier.Steps, Rows: r.Rows - earlier.Rows,
	}
}

// MeanBatch is the average number of sequences per decode step (0 before any step).
func (r MeterReading) MeanBatch() float64 {
	if r.Steps == 0 {
		return 0
	}
	return float64(r.Rows) / float64(r.Steps)
}

func (m *Meter) add(busy time.Duration) {
	if m != nil {
		m.busy.Add(int64(busy))
	}
}

func (m *Meter) step(busy time.Duration, rows int) {
	if m != nil {
		m.busy.Add(int64(busy))
		m.steps.Add(1)
		m.rows.Add(int64(rows))
	}
}

func (m *Meter) prefill(busy time.Duration) {
	if m != nil {
		m.busy.Add(int64(busy))
		m.seqs.Add(1)
	}
}
