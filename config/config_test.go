package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/settings"
)

func TestClosestNameSuggestsTypos(t *testing.T) {
	known := Names(Worker{})
	for typo, want := range map[string]string{
		"LA_METRICS_ADRR": "LA_METRICS_ADDR", // transposition
		"LA_PREFECH":      "LA_PREFETCH",     // a letter missing
		"LA_GRACEE":       "LA_GRACE",        // one too many
		"LA_ACKWAIT":      "LA_ACK_WAIT",
		"LA_SOMETHING":    "", // nothing near: no guess
	} {
		if got := closest(typo, known); got != want {
			t.Errorf("closest(%s) = %q, want %q", typo, got, want)
		}
	}
}

func TestUnknownIgnoresOtherPrefixesAndKnownNames(t *testing.T) {
	known := Names(Worker{})
	env := []string{"PATH=/bin", "HOME=/root", "LA_GRACE=1s", "NATS_URL=x", "LA_PREFECH=3", "LA_ZZZ=1"}
	err := Unknown(env, known)
	if err == nil {
		t.Fatal("unknown LA_ variables accepted")
	}
	msg := err.Error()
	for _, want := range []string{"LA_PREFECH: unknown; did you mean LA_PREFETCH?", "LA_ZZZ: unknown"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	for _, unwanted := range []string{"PATH", "HOME", "NATS_URL", "LA_GRACE:"} {
		if strings.Contains(msg, unwanted) {
			t.Errorf("error %q names %s, which is not an unknown LA_ variable", msg, unwanted)
		}
	}
}

func TestSettingsReportSourcesAndRedactSecrets(t *testing.T) {
	var c Worker
	c.Runner.Grace = 45 * time.Second
	c.NATS.Password = "hunter2"
	c.Topology.BackOff = []time.Duration{time.Minute, 2 * time.Minute}
	got := map[string]Setting{}
	for _, s := range Settings(&c, []string{"LA_GRACE=45s", "LA_NATS_PASSWORD=hunter2"}) {
		got[s.Name] = s
	}
	if s := got["LA_GRACE"]; s.Value != "45s" || s.Source != "environment" || s.Default != "30s" {
		t.Errorf("LA_GRACE: %+v", s)
	}
	if s := got["LA_NATS_PASSWORD"]; s.Value != Redacted || !s.Secret {
		t.Errorf("LA_NATS_PASSWORD: %+v, want it redacted", s)
	}
	if s := got["LA_NATS_TOKEN"]; s.Value != "" || s.Source != "default" {
		t.Errorf("an unset secret: %+v, want empty (not redacted) from the default", s)
	}
	if s := got["LA_BACKOFF"]; s.Value != "1m0s,2m0s" {
		t.Errorf("LA_BACKOFF printed as %q, want the list envconfig reads back", s.Value)
	}
	// Every variable has exactly one setting: names are unique across the tree.
	seen := map[string]bool{}
	for _, n := range Names(Worker{}) {
		if seen[n] {
			t.Errorf("%s is declared twice", n)
		}
		seen[n] = true
	}
}

func TestPrefetchFollowsTheBatch(t *testing.T) {
	var c Worker
	c.Engine.MaxBatch, c.Engine.Chips = 8, 1
	if got := c.RunnerConfig("w", 0).Prefetch; got != 10 {
		t.Errorf("LA_PREFETCH=0 with LA_MAX_BATCH=8 holds %d jobs, want 10 (every slot plus two prepared)", got)
	}
	c.Runner.Prefetch = 3
	if got := c.RunnerConfig("w", 0).Prefetch; got != 3 {
		t.Errorf("an explicit LA_PREFETCH=3 became %d", got)
	}
	var complaints []string
	c.Engine.MaxBatch = engine.MaxBatchLimit + 1
	complaints = messages(c.Engine.Validate())
	if !slices.ContainsFunc(complaints, func(s string) bool { return strings.Contains(s, "LA_MAX_BATCH") }) {
		t.Errorf("LA_MAX_BATCH=%d accepted: %v", engine.MaxBatchLimit+1, complaints)
	}
}

func TestWeightsQuantIsValidated(t *testing.T) {
	complaints := func(backend, quant string) []string {
		var out []string
		e := Engine{Settings: engine.Settings{Backend: engine.BackendKind(backend), WeightsQuant: engine.WeightsQuant(quant), GenerationMode: "ar", MaxBatch: 1, MaxSeqLen: 64, MaxNewTokens: 1, MaxNewTokensCap: 1}, Chips: 1}
		out = messages(e.Validate())
		return out
	}
	for _, ok := range [][2]string{{"cpu", "bf16"}, {"cpu", "q8"}, {"cpu", ""}, {"ttnn", "bf16"}} {
		if c := complaints(ok[0], ok[1]); len(c) != 0 {
			t.Errorf("LA_ENGINE=%s LA_WEIGHTS_QUANT=%s refused: %v", ok[0], ok[1], c)
		}
	}
	for bad, want := range map[[2]string]string{
		{"cpu", "q4"}:  `LA_WEIGHTS_QUANT is "q4", want one of bf16, q8`,
		{"ttnn", "q8"}: "LA_WEIGHTS_QUANT=q8 is a cpu backend setting",
	} {
		if c := complaints(bad[0], bad[1]); !slices.ContainsFunc(c, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("LA_ENGINE=%s LA_WEIGHTS_QUANT=%s: complaints %v, want %q", bad[0], bad[1], c, want)
		}
	}
	var w Worker
	if !slices.Contains(Names(w), "LA_WEIGHTS_QUANT") {
		t.Error("LA_WEIGHTS_QUANT is not a known variable")
	}
}

// TestTTNNKVPoolBoundsTheBatch: on the ttnn backend LA_MAX_BATCH x LA_MAX_SEQ_LEN must
// fit the adapter's paged KV pool, and the complaint names both variables; the cpu
// backend has no such pool.
func TestTTNNKVPoolBoundsTheBatch(t *testing.T) {
	complaints := func(backend string, batch, seq int) []string {
		var out []string
		e := Engine{Settings: engine.Settings{Backend: engine.BackendKind(backend), GenerationMode: "ar", MaxBatch: batch, MaxSeqLen: seq, MaxNewTokens: 1, MaxNewTokensCap: 1}, Chips: 1}
		out = messages(e.Validate())
		return out
	}
	if c := complaints("ttnn", 8, 4096); len(c) != 0 {
		t.Errorf("ttnn at 8 x 4096 (the pool exactly) refused: %v", c)
	}
	c := complaints("ttnn", 16, 4096)
	if len(c) != 1 || !strings.Contains(c[0], "LA_MAX_BATCH x LA_MAX_SEQ_LEN is 16 x 4096 = 65536") ||
		!strings.Contains(c[0], "32768 positions") {
		t.Errorf("ttnn at 16 x 4096: complaints %v, want one naming both variables and the pool", c)
	}
	if c := complaints("cpu", 16, 4096); len(c) != 0 {
		t.Errorf("cpu at 16 x 4096 refused: %v", c)
	}
}

// TestGenerationModeIsValidated: LA_GENERATION_MODE takes the engine's modes and nothing
// else (the reference's "fast" mode is for tests, not served), and says which it wants.
func TestGenerationModeIsValidated(t *testing.T) {
	for mode, ok := range map[string]bool{"ar": true, "hybrid": true, "fast": false, "HYBRID": false, "": false} {
		var complaints []string
		e := Engine{Settings: engine.Settings{Backend: "cpu", MaxBatch: 1, MaxSeqLen: 64, MaxNewTokens: 8, MaxNewTokensCap: 8, GenerationMode: engine.GenerationMode(mode)}, Chips: 1}
		complaints = messages(e.Validate())
		switch {
		case ok && len(complaints) > 0:
			t.Errorf("LA_GENERATION_MODE=%q refused: %v", mode, complaints)
		case !ok && (len(complaints) != 1 || !strings.Contains(complaints[0], "LA_GENERATION_MODE") ||
			!strings.Contains(complaints[0], "want one of ar, hybrid")):
			t.Errorf("LA_GENERATION_MODE=%q: complaints %v, want one naming the variable and the modes", mode, complaints)
		}
	}
	for _, s := range Settings(Worker{}, nil) {
		if s.Name == "LA_GENERATION_MODE" {
			if s.Default != "ar" || s.Section != "Engine" {
				t.Errorf("LA_GENERATION_MODE: default %q in %s, want ar in Engine", s.Default, s.Section)
			}
			return
		}
	}
	t.Error("LA_GENERATION_MODE is not a setting of the worker")
}

// messages are the complaints of a section's Validate, one string each.
func messages(err error) []string {
	var out []string
	for _, e := range settings.Split(err) {
		out = append(out, e.Error())
	}
	return out
}
