package sim

import (
	"fmt"
	"math"
	"time"
)

// The shapes the reference costs were measured at (docs/background.md, "Measured on a
// p150a"): vision on the served canonical grid, 24x44 patches; prefill of a 303-token prompt,
// which the chip pads to 512.
const (
	ReferencePatches = 24 * 44
	ReferencePrefill = 512
)

// Costs is the device's cost model: how long each step keeps the simulated chip busy.
// package config states the defaults (LA_SIM_*); docs/sim.md says where each comes from
// and which parts are assumptions.
type Costs struct {
	// Vision is the vision tower on ReferencePatches patches; the cost scales linearly
	// with the patch count.
	Vision time.Duration
	// Prefill is a prompt padded to ReferencePrefill tokens; the cost scales linearly with
	// the padded length (PrefillLength).
	Prefill time.Duration
	// Decode is one decode step of one sequence.
	Decode time.Duration
	// BatchAlpha is the extra cost of each further row of a decode step, as a fraction of
	// Decode: a step of B rows costs Decode * (1 + BatchAlpha*(B-1)). A step always has the
	// chip's batch size of rows (LA_MAX_BATCH), live or idle.
	BatchAlpha float64
	// Speed divides every cost: 10 runs the device ten times faster than the chip (CI).
	Speed float64
}

// Validate reports a cost model that makes no sense.
func (c Costs) Validate() error {
	switch {
	case c.Vision < 0 || c.Prefill < 0 || c.Decode < 0:
		return fmt.Errorf("sim: costs vision %s, prefill %s, decode %s: none may be negative", c.Vision, c.Prefill, c.Decode)
	case c.BatchAlpha < 0 || math.IsNaN(c.BatchAlpha) || math.IsInf(c.BatchAlpha, 0):
		return fmt.Errorf("sim: batch alpha %v: want 0 or more", c.BatchAlpha)
	case !(c.Speed > 0) || math.IsInf(c.Speed, 0):
		return fmt.Errorf("sim: speed %v: want a positive factor", c.Speed)
	}
	return nil
}

// VisionCost is the device time of vision on a gridH x gridW grid.
func (c Costs) VisionCost(gridH, gridW int) time.Duration {
	return c.scale(c.Vision, float64(gridH*gridW)/ReferencePatches)
}

// PrefillCost is the device time of a prefill that runs at paddedLen tokens.
func (c Costs) PrefillCost(paddedLen int) time.Duration {
	return c.scale(c.Prefill, float64(paddedLen)/ReferencePrefill)
}

// StepCost is the device time of one decode step of the given rows.
func (c Costs) StepCost(rows int) time.Duration {
	return c.scale(c.Decode, 1+c.BatchAlpha*float64(max(rows, 1)-1))
}

// HybridStepCost is the device time of one Step of parallel box decoding that runs rows
// rows in all (every slot's pending and block rows) on a chip of maxBatch slots: one
// forward like a decode step, whose rows are at least the chip's batch, as its decode
// step's are (docs/sim.md, "Hybrid mode").
func (c Costs) HybridStepCost(rows, maxBatch int) time.Duration {
	return c.StepCost(max(rows, maxBatch))
}

func (c Costs) scale(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) * f / c.Speed))
}

// PrefillLength is the length a prompt of n tokens is run at: like the chip's prefill, the
// next power of two, at least 128 (512 for the 303-token demo prompt).
func PrefillLength(n int) int {
	padded := 128
	for padded < n {
		padded *= 2
	}
	return padded
}
