package sim

import (
	"math"
	"time"

	"github.com/locateanything/detect/internal/settings"
)

// The shapes the reference costs were measured at (docs/background.md, "Measured on a
// p150a"): vision on the served canonical grid, 24x44 patches; prefill of a 303-token prompt,
// which the chip pads to 512.
const (
	ReferencePatches = 24 * 44
	ReferencePrefill = 512
)

// Costs is the device's cost model: how long each step keeps the simulated chip busy.
// The settings are declared here (the tags: variable, default, meaning; package config
// reads them from the environment). The defaults are the p150a's measured figures; the
// batched step's cost is an assumption until measured on hardware (docs/sim.md says where
// each comes from).
type Costs struct {
	// Vision is the vision tower on ReferencePatches patches; the cost scales linearly
	// with the patch count.
	Vision time.Duration `envconfig:"LA_SIM_VISION" default:"49ms" desc:"simulated vision on a 24x44 grid; linear in patches"`
	// Prefill is a prompt padded to ReferencePrefill tokens; the cost scales linearly with
	// the padded length (PrefillLength).
	Prefill time.Duration `envconfig:"LA_SIM_PREFILL" default:"58ms" desc:"simulated prefill padded to 512 tokens; linear in the padded length"`
	// Decode is one decode step of one sequence.
	Decode time.Duration `envconfig:"LA_SIM_DECODE" default:"24ms" desc:"simulated decode step of one sequence"`
	// BatchAlpha is the extra cost of each further row of a decode step, as a fraction of
	// Decode: a step of B rows costs Decode * (1 + BatchAlpha*(B-1)). A step always has the
	// chip's batch size of rows (LA_MAX_BATCH), live or idle.
	BatchAlpha float64 `envconfig:"LA_SIM_BATCH_ALPHA" default:"0.05" desc:"each further sequence in a simulated step adds this fraction of LA_SIM_DECODE"`
	// Speed divides every cost: 10 runs the device ten times faster than the chip (CI).
	Speed float64 `envconfig:"LA_SIM_SPEED" default:"1" desc:"every simulated cost is divided by this"`
}

// Validate reports every cost that makes no sense, each naming its variable.
func (c Costs) Validate() error {
	var v settings.Check
	v.NotNegativeDuration("LA_SIM_VISION", c.Vision, "free")
	v.NotNegativeDuration("LA_SIM_PREFILL", c.Prefill, "free")
	v.NotNegativeDuration("LA_SIM_DECODE", c.Decode, "free")
	v.Finite("LA_SIM_BATCH_ALPHA", c.BatchAlpha, 0)
	if !(c.Speed > 0) || math.IsInf(c.Speed, 0) {
		v.Add("LA_SIM_SPEED is %v, want a positive factor (10 runs the simulated chip ten times faster)", c.Speed)
	}
	return v.Err()
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
