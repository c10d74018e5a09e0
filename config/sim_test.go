package config

import (
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// TestSimDefaultsAreTheChipsFigures: LA_SIM_* default to the p150a figures the cost model
// is documented with, reach engine/sim unchanged, and nonsense is refused.
func TestSimDefaultsAreTheChipsFigures(t *testing.T) {
	var c Worker
	if err := envconfig.Process("", &c); err != nil {
		t.Fatal(err)
	}
	costs := c.Sim
	if costs.Vision != 49*time.Millisecond || costs.Prefill != 58*time.Millisecond || costs.Decode != 24*time.Millisecond ||
		costs.BatchAlpha != 0.05 || costs.Speed != 1 {
		t.Errorf("default cost model %+v", costs)
	}
	if err := costs.Validate(); err != nil {
		t.Errorf("the default cost model is refused: %v", err)
	}
	c.Sim = Sim{Vision: -time.Millisecond, BatchAlpha: -0.1, Speed: 0}
	err := c.Validate()
	for _, name := range []string{"LA_SIM_VISION", "LA_SIM_BATCH_ALPHA", "LA_SIM_SPEED"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s not refused: %v", name, err)
		}
	}
}
