package sim

import (
	"sync/atomic"
	"time"
)

// Meter adds up what simulated devices did: their busy time (the modelled cost of every
// step, the time the chip would have spent computing), the wake-up lateness their threads
// were forgiven (timeline), and their prefills and decode steps, parallel box decoding's
// included. One Meter may serve one chip or several; its methods are safe for concurrent
// use, so a load test reads it while the chips run.
type Meter struct {
	busy       atomic.Int64 // nanoseconds
	late       atomic.Int64 // nanoseconds
	steps      atomic.Int64 // decode and Step calls
	rows       atomic.Int64 // sequences advanced by them
	seqs       atomic.Int64 // prefills
	blockSteps atomic.Int64 // Step calls
	stepRows   atomic.Int64 // rows they ran
}

// MeterReading is a Meter at one moment.
type MeterReading struct {
	Busy      time.Duration // device time
	Late      time.Duration // wake-up lateness forgiven: the sleeping thread's, not the device's
	Sequences int64         // prefills run
	Steps     int64         // decode steps run (Decode and Step calls)
	Rows      int64         // sequences those steps advanced, summed
	// Parallel box decoding: Step calls (counted in Steps too) and the rows they ran,
	// every slot's pending and block rows before the padding to the batch.
	BlockSteps int64
	StepRows   int64
}

// Read returns the totals so far.
func (m *Meter) Read() MeterReading {
	return MeterReading{
		Busy: time.Duration(m.busy.Load()), Late: time.Duration(m.late.Load()), Sequences: m.seqs.Load(),
		Steps: m.steps.Load(), Rows: m.rows.Load(), BlockSteps: m.blockSteps.Load(), StepRows: m.stepRows.Load(),
	}
}

// Sub is what happened between an earlier reading and r.
func (r MeterReading) Sub(earlier MeterReading) MeterReading {
	return MeterReading{
		Busy: r.Busy - earlier.Busy, Late: r.Late - earlier.Late, Sequences: r.Sequences - earlier.Sequences,
		Steps: r.Steps - earlier.Steps, Rows: r.Rows - earlier.Rows,
		BlockSteps: r.BlockSteps - earlier.BlockSteps, StepRows: r.StepRows - earlier.StepRows,
	}
}

// Add is the sum of two readings (of two chips, say).
func (r MeterReading) Add(o MeterReading) MeterReading {
	return MeterReading{
		Busy: r.Busy + o.Busy, Late: r.Late + o.Late, Sequences: r.Sequences + o.Sequences,
		Steps: r.Steps + o.Steps, Rows: r.Rows + o.Rows,
		BlockSteps: r.BlockSteps + o.BlockSteps, StepRows: r.StepRows + o.StepRows,
	}
}

// MeanBatch is the average number of sequences per decode step (0 before any step).
func (r MeterReading) MeanBatch() float64 {
	if r.Steps == 0 {
		return 0
	}
	return float64(r.Rows) / float64(r.Steps)
}

// record adds one device call: its cost, the wake-up lateness forgiven after it, the
// sequences it started (a prefill) and the rows it advanced (a decode step; 0 for others).
func (m *Meter) record(busy, late time.Duration, seqs, rows int) {
	if m == nil {
		return
	}
	m.busy.Add(int64(busy))
	m.late.Add(int64(late))
	m.seqs.Add(int64(seqs))
	if rows > 0 {
		m.steps.Add(1)
		m.rows.Add(int64(rows))
	}
}

// recordStep adds one Step call: its cost, the lateness forgiven after it, the sequences
// it advanced and the rows it ran.
func (m *Meter) recordStep(busy, late time.Duration, seqs, rows int) {
	if m == nil {
		return
	}
	m.record(busy, late, 0, seqs)
	m.blockSteps.Add(1)
	m.stepRows.Add(int64(rows))
}
