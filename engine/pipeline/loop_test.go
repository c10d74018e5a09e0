package pipeline

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
)

// scriptBackend replays a fixed token script in one slot; it records what the loop asked
// of it.
type scriptBackend struct {
	script   []int32
	probs    []float32 // each script token's probability; nil gives 0.5
	asked    int       // calls that asked for the probability
	pos      int
	releases int
	decodes  int
	failAt   int // decode call number that fails (0 = never)
	onStep   func(step int)
}

func (b *scriptBackend) Name() string                     { return "script" }
func (b *scriptBackend) MaxBatch() int                    { return 1 }
func (b *scriptBackend) Vision([]float32, int, int) error { return nil }
func (b *scriptBackend) PrefillLength(n int) int          { return n }
func (b *scriptBackend) Close() error                     { return nil }
func (b *scriptBackend) Reset() error                     { return b.Release(0) }
func (b *scriptBackend) Release(int) error                { b.releases++; b.pos = 0; return nil }
func (b *scriptBackend) prob(i int) float32 {
	if b.probs == nil {
		return 0.5
	}
	return b.probs[i]
}

// Step is the prefill when the slot is free (pos 0), a decode step otherwise; greedy
// rows only.
func (b *scriptBackend) Step(slots []engine.StepSlot, k int, watch []int32, rows []engine.StepRow) error {
	if len(slots) != 1 || slots[0].Slot != 0 || len(slots[0].Block) > 0 || slots[0].NoOutput || k != 1 || len(watch) > 0 || len(rows) != 1 {
		return errors.New("script: greedy steps of slot 0 only")
	}
	if b.pos == 0 {
		b.pos = 1
		b.asked++
		rows[0].TopIDs[0], rows[0].TopProbs[0] = b.script[0], b.prob(0)
		return nil
	}
	b.decodes++
	if b.onStep != nil {
		b.onStep(b.decodes)
	}
	if b.failAt == b.decodes {
		return errors.New("device fell over")
	}
	if !slices.Equal(slots[0].Pending, b.script[b.pos-1:b.pos]) {
		return errors.New("decode was not fed slot 0's previous token")
	}
	b.asked++
	rows[0].TopIDs[0], rows[0].TopProbs[0] = b.script[b.pos], b.prob(b.pos)
	b.pos++
	return nil
}

const eos = 99

func prepared(budget int) *engine.Prepared {
	return &engine.Prepared{MaxNewTokens: budget, PromptIDs: []int32{1, 2, 3}, GridH: 2, GridW: 2}
}

func TestGreedyStopsOnEOS(t *testing.T) {
	b := &scriptBackend{script: []int32{5, 6, 7, eos, 8, 9}, probs: []float32{0.9, 0.8, 0.7, 0.6, 0.5, 0.4}}
	g, err := Greedy(context.Background(), b, prepared(10), 0, eos)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{5, 6, 7, eos}; !equal(g.Tokens, want) || !g.StoppedOnEOS {
		t.Fatalf("tokens %v eos %v, want %v and true", g.Tokens, g.StoppedOnEOS, want)
	}
	// Every step asks for the token's probability, and the sequence keeps each one.
	if want := b.probs[:4]; b.asked != 4 || !slices.Equal(g.Probs, want) {
		t.Fatalf("asked for %d probabilities and kept %v, want 4 and %v", b.asked, g.Probs, want)
	}
	if g.DecodeSteps != 3 || b.decodes != 3 {
		t.Fatalf("decode steps %d (backend saw %d), want 3", g.DecodeSteps, b.decodes)
	}
	if b.releases != 1 {
		t.Fatalf("backend released %d times, want 1", b.releases)
	}
}

func TestGreedyStopsOnBudget(t *testing.T) {
	b := &scriptBackend{script: []int32{5, 6, 7, 8, 9, eos}}
	g, err := Greedy(context.Background(), b, prepared(3), 0, eos)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{5, 6, 7}; !equal(g.Tokens, want) || g.StoppedOnEOS {
		t.Fatalf("tokens %v eos %v, want %v and false", g.Tokens, g.StoppedOnEOS, want)
	}
	if b.decodes != 2 {
		t.Fatalf("%d decode calls for a budget of 3, want 2 (the first token comes from prefill)", b.decodes)
	}
}

func TestGreedyBudgetOfOne(t *testing.T) {
	b := &scriptBackend{script: []int32{5, 6}}
	g, err := Greedy(context.Background(), b, prepared(1), 0, eos)
	if err != nil || !equal(g.Tokens, []int32{5}) || b.decodes != 0 {
		t.Fatalf("got %v, %v with %d decodes; want [5] and no decode", g, err, b.decodes)
	}
	if _, err := Greedy(context.Background(), b, prepared(0), 0, eos); err == nil {
		t.Fatal("a budget of 0 must be refused")
	}
}

func TestGreedyCancelledBetweenSteps(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &scriptBackend{script: []int32{5, 6, 7, 8, 9, 10, eos}}
	b.onStep = func(step int) {
		if step == 2 {
			cancel()
		}
	}
	_, err := Greedy(ctx, b, prepared(10), 0, eos)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if b.decodes != 2 {
		t.Fatalf("the loop ran %d decode steps, want it to stop right after the cancel at step 2", b.decodes)
	}
	if b.releases != 1 {
		t.Fatalf("a cancelled run must still release its slot (releases=%d)", b.releases)
	}
}

func TestGreedyDeviceErrorReleases(t *testing.T) {
	b := &scriptBackend{script: []int32{5, 6, 7, eos}, failAt: 2}
	if _, err := Greedy(context.Background(), b, prepared(10), 0, eos); err == nil {
		t.Fatal("a failing decode step must fail the run")
	}
	if b.releases != 1 {
		t.Fatalf("releases=%d, want 1", b.releases)
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
