package engine

import (
	"testing"
	"time"
)

// An AR sequence's decode rate counts the tokens after the first (the prefill wrote it); a
// hybrid one's counts every token, all written by its steps, several per step.
func TestDecodeTokensPerSecond(t *testing.T) {
	ar := &Sequence{Mode: GenerationAR, Tokens: make([]int32, 11), DecodeSteps: 10, Decode: 2 * time.Second}
	if got := ar.DecodeTokensPerSecond(); got != 5 {
		t.Errorf("AR: %v tokens/s, want 5", got)
	}
	hy := &Sequence{Mode: GenerationHybrid, Tokens: make([]int32, 12), DecodeSteps: 3, Decode: 2 * time.Second}
	if got := hy.DecodeTokensPerSecond(); got != 6 {
		t.Errorf("hybrid: %v tokens/s, want 6", got)
	}
	if got := (&Sequence{Mode: GenerationHybrid, Tokens: make([]int32, 3)}).DecodeTokensPerSecond(); got != 0 {
		t.Errorf("no steps: %v tokens/s, want 0", got)
	}
}
