package decodemetrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counts gathers reg and returns each series' sample count, by metric name and mode.
func counts(t *testing.T, reg *prometheus.Registry) map[string]map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]uint64{}
	for _, f := range families {
		out[f.GetName()] = map[string]uint64{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				out[f.GetName()][l.GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return out
}

// TestObserve: both series of every mode exist from the start; a prediction without a
// mode counts as ar; an answer of one token (no step) counts its zero steps but no rate.
func TestObserve(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New("la_test", "answer")
	reg.MustRegister(s.Collectors()...)
	if c := counts(t, reg); len(c["la_test_decode_steps"]) != 2 || len(c["la_test_tokens_per_step"]) != 2 {
		t.Fatalf("series before any answer: %v, want ar and hybrid of both", c)
	}
	s.Observe("", 4, 5)
	s.Observe("hybrid", 2, 12)
	s.Observe("hybrid", 0, 1)
	c := counts(t, reg)
	if got := c["la_test_decode_steps"]; got["ar"] != 1 || got["hybrid"] != 2 {
		t.Errorf("decode steps observed %v, want ar 1 (the answer without a mode) and hybrid 2", got)
	}
	if got := c["la_test_tokens_per_step"]; got["ar"] != 1 || got["hybrid"] != 1 {
		t.Errorf("tokens per step observed %v, want ar 1 and hybrid 1 (the one-token answer has no rate)", got)
	}
}
