package config

import (
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"
)

// TestEffectiveShowsDerivedValues: `worker config` shows the value in effect of a variable
// whose 0 or empty means "derived", marked derived, and leaves a set value alone.
func TestEffectiveShowsDerivedValues(t *testing.T) {
	var c Worker
	if err := envconfig.Process("", &c); err != nil {
		t.Fatal(err)
	}
	c.Engine.MaxBatch, c.Engine.Backend = 4, "ttnn"
	if err := c.Finish(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	got := map[string]Setting{}
	for _, s := range c.Effective([]string{"LA_MAX_BATCH=4", "LA_ENGINE=ttnn"}) {
		got[s.Name] = s
	}
	for name, want := range map[string]string{
		"LA_PREFETCH":       "6 (LA_MAX_BATCH + 2)",
		"LA_IN_TOKEN_LIMIT": "min(1024, the checkpoint's)",
		"LA_CANON_GRID":     "from LA_CANON_ASPECT 1920x1080 at open",
		"LA_RESULTS_URL":    "file://" + c.DataDir + "/results/",
	} {
		if s := got[name]; s.Value != want || s.Source != "derived" {
			t.Errorf("%s: %q from %s, want %q derived", name, s.Value, s.Source, want)
		}
	}
	if s := got["LA_MAX_DECODED_BYTES"]; !strings.HasSuffix(s.Value, "(a quarter of the memory the worker may use)") || s.Value[0] == '0' {
		t.Errorf("LA_MAX_DECODED_BYTES: %q, want the budget in effect", s.Value)
	}
	if s := got["LA_MAX_BATCH"]; s.Value != "4" || s.Source != "environment" {
		t.Errorf("LA_MAX_BATCH: %+v, want 4 from the environment", s)
	}
	if s := got["LA_GRACE"]; s.Value != "30s" || s.Source != "default" {
		t.Errorf("LA_GRACE: %+v, want 30s by default", s)
	}
	c.Runner.Prefetch = 3
	for _, s := range c.Effective(nil) {
		if s.Name == "LA_PREFETCH" && (s.Value != "3" || s.Source == "derived") {
			t.Errorf("an explicit LA_PREFETCH=3 shows as %+v", s)
		}
	}
}

// TestEveryWorkerVariableHasAMeaning: `worker --help` and `worker config` give each
// variable a one-line meaning, from its desc tag.
func TestEveryWorkerVariableHasAMeaning(t *testing.T) {
	for _, s := range Settings(Worker{}, nil) {
		if s.Desc == "" || strings.Contains(s.Desc, "\n") {
			t.Errorf("%s: meaning %q, want one line", s.Name, s.Desc)
		}
	}
}
