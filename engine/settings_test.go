package engine

import (
	"runtime"
	"strings"
	"testing"

	"github.com/locateanything/detect/internal/settings"
)

// valid is a Settings every rule accepts, for the cases to change one field of.
func valid() Settings {
	return Settings{Backend: BackendCPU, MaxSeqLen: 4096, MaxBatch: 8, MaxNewTokens: 128, MaxNewTokensCap: 1024,
		GenerationMode: GenerationAR, WeightsQuant: WeightsBF16, CanonAspect: "1920x1080"}
}

// TestSettingsValidateNamesTheVariable: the engine's one Validate refuses what the
// worker's configuration refused before it moved here, each complaint naming its variable
// in the same words.
func TestSettingsValidateNamesTheVariable(t *testing.T) {
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid settings refused: %v", err)
	}
	for _, c := range []struct {
		change func(*Settings)
		want   string
	}{
		{func(s *Settings) { s.Backend = "gpu" }, `LA_ENGINE is "gpu", want one of cpu, ttnn, sim`},
		{func(s *Settings) { s.WeightsQuant = "q4" }, `LA_WEIGHTS_QUANT is "q4", want one of bf16, q8`},
		{func(s *Settings) { s.Backend, s.WeightsQuant = BackendSim, WeightsQ8 }, `LA_WEIGHTS_QUANT=q8 is a cpu backend setting (LA_ENGINE is "sim")`},
		{func(s *Settings) { s.MaxBatch = 33 }, "LA_MAX_BATCH is 33, want 1..32"},
		{func(s *Settings) { s.Backend, s.MaxBatch = BackendTTNN, 16 }, "LA_MAX_BATCH x LA_MAX_SEQ_LEN is 16 x 4096 = 65536"},
		{func(s *Settings) { s.Threads = -1 }, "LA_THREADS is -1, want 0 (one per core) or more"},
		{func(s *Settings) { s.InTokenLimit = -1 }, "LA_IN_TOKEN_LIMIT is -1"},
		{func(s *Settings) { s.MaxSeqLen = 0 }, "LA_MAX_SEQ_LEN is 0, want at least 1"},
		{func(s *Settings) { s.MaxNewTokens = 2000 }, "LA_MAX_NEW_TOKENS is 2000, want 1..LA_MAX_NEW_TOKENS_CAP (1024)"},
		{func(s *Settings) { s.MaxNewTokens = 0 }, "LA_MAX_NEW_TOKENS is 0, want 1..LA_MAX_NEW_TOKENS_CAP (1024)"},
		{func(s *Settings) { s.GenerationMode = "fast" }, `LA_GENERATION_MODE is "fast", want one of ar, hybrid`},
	} {
		s := valid()
		c.change(&s)
		errs := settings.Split(s.Validate())
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%+v: complaints %v, want one saying %q", s, errs, c.want)
		}
	}
}

// TestSettingsDerivations: what 0 or empty means, as the pipeline opens with it and
// `worker config` shows it.
func TestSettingsDerivations(t *testing.T) {
	s := valid()
	if got := s.ThreadCount(); got != runtime.NumCPU() {
		t.Errorf("LA_THREADS=0 runs %d threads, want one per CPU (%d)", got, runtime.NumCPU())
	}
	if s.Threads = 3; s.ThreadCount() != 3 {
		t.Errorf("LA_THREADS=3 runs %d threads", s.ThreadCount())
	}
	for _, c := range []struct {
		backend           BackendKind
		limit, ckpt, want int
	}{
		{BackendCPU, 0, 256, 256}, {BackendCPU, 0, 25600, ServedInTokenLimit}, {BackendCPU, 64, 25600, 64},
		{BackendSim, 0, 256, ServedInTokenLimit}, {BackendTTNN, 0, 25600, ServedInTokenLimit},
	} {
		s := Settings{Backend: c.backend, InTokenLimit: c.limit}
		if got := s.InTokens(c.ckpt); got != c.want {
			t.Errorf("%s, LA_IN_TOKEN_LIMIT=%d, checkpoint %d: %d image tokens, want %d", c.backend, c.limit, c.ckpt, got, c.want)
		}
	}
	for _, c := range []struct {
		backend    BackendKind
		grid, want string
	}{{BackendCPU, "", "native"}, {BackendTTNN, "", ""}, {BackendSim, "", ""}, {BackendCPU, "24x44", "24x44"}} {
		if got := (Settings{Backend: c.backend, CanonGrid: c.grid}).CanonGridSetting(); got != c.want {
			t.Errorf("%s, LA_CANON_GRID=%q: %q, want %q", c.backend, c.grid, got, c.want)
		}
	}
}
