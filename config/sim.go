package config

import (
	"math"
	"time"

	"github.com/locateanything/detect/engine/sim"
)

// Costs is the simulated chip's cost model.
func (s Sim) Costs() sim.Costs {
	return sim.Costs{Vision: s.Vision, Prefill: s.Prefill, Decode: s.Decode, BatchAlpha: s.BatchAlpha, Speed: s.Speed}
}

func (s Sim) validate(add adder) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"LA_SIM_VISION", s.Vision}, {"LA_SIM_PREFILL", s.Prefill}, {"LA_SIM_DECODE", s.Decode}} {
		if d.v < 0 {
			add("%s is %s, want 0 or a positive duration", d.name, d.v)
		}
	}
	if s.BatchAlpha < 0 || math.IsNaN(s.BatchAlpha) || math.IsInf(s.BatchAlpha, 0) {
		add("LA_SIM_BATCH_ALPHA is %v, want 0 or more", s.BatchAlpha)
	}
	if !(s.Speed > 0) || math.IsInf(s.Speed, 0) {
		add("LA_SIM_SPEED is %v, want a positive factor (10 runs the simulated chip ten times faster)", s.Speed)
	}
}
