package pipeline

import (
	"context"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/enginetest"
)

// causalCopy is the block-trained test model with text_config.causal_attn set.
func causalCopy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := enginetest.CopyWithTextConfig(blocksDir, dir, map[string]any{"causal_attn": true}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// upstreamCausalLoop is upstream's hybrid loop with text_config.causal_attn set,
// transcribed on plain causal forwards. Upstream's block step feeds the pending tokens and
// [last, <text_mask> x 5] in one forward under the causal mask, and with causal_attn it
// leaves that mask causal inside the block (update_causal_mask_for_one_gen_window_2d skips
// its both-ways override) and only hides, from the block's rows, the column just before the
// block (the last committed token, which block row 0 repeats at the same position). So
// block row i sees the committed tokens but the last, then row 0 (the last again, at its
// own position) and rows 1..i: exactly the causal sequence committed + <text_mask> x i,
// whose last row's next-token row is block row i. Each such row is computed here as a
// prefill of that sequence on a free slot (vision first, for the prompt's image), so no
// block or block mask of the engine's is used; the acceptance rules are the loop's own
// (blockdecode, checked against the reference elsewhere).
func upstreamCausalLoop(t *testing.T, p *Pipeline, prep *engine.Prepared) []int32 {
	t.Helper()
	st := p.st
	forward := func(ids []int32) engine.StepRow {
		t.Helper()
		if err := p.backend.Vision(prep.Patches, prep.GridH, prep.GridW); err != nil {
			t.Fatal(err)
		}
		rows := engine.NewStepRows(1, blockdecode.K, len(st.watch))
		if err := p.backend.Step([]engine.StepSlot{{Slot: 0, Pending: ids}}, blockdecode.K, st.watch, rows); err != nil {
			t.Fatal(err)
		}
		if err := p.backend.Release(0); err != nil {
			t.Fatal(err)
		}
		return rows[0]
	}
	committed := slices.Clone(prep.PromptIDs)
	var tokens []int32
	oneToken := false
	for len(tokens) < prep.MaxNewTokens {
		left := prep.MaxNewTokens - len(tokens)
		var d blockdecode.Decision
		var err error
		if oneToken {
			d, err = blockdecode.AR(forward(committed), st.tok, st.mode, left)
		} else {
			rows := make([]engine.StepRow, blockdecode.Size)
			for i := range rows {
				rows[i] = forward(append(slices.Clone(committed), slices.Repeat([]int32{st.tok.TextMask}, i)...))
			}
			d, err = blockdecode.Block(rows, st.tok, st.mode, left)
		}
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, d.Commit...)
		committed = append(committed, d.Commit...)
		oneToken = (oneToken || d.ToAR) && !d.ToBlocks
		if d.Stop {
			break
		}
	}
	return tokens
}

// TestHybridWithCausalAttnIsUpstreamsLoop: on a checkpoint whose text_config.causal_attn is
// set, hybrid decoding runs (it is not refused) with upstream's causal block mask: the
// pipeline's tokens, scene for scene, are those of upstream's loop transcribed on plain
// causal forwards (upstreamCausalLoop). And the flag reaches the mask: the same scenes
// decode differently on the checkpoint without it (the block model's own goldens).
func TestHybridWithCausalAttnIsUpstreamsLoop(t *testing.T) {
	f := loadGolden(t, "tiny-shapes-blocks.json")
	p := openPipeline(t, OpenOptions{Settings: engine.Settings{InTokenLimit: f.Runs[0].InTokenLimit, MaxNewTokens: 48, MaxNewTokensCap: 64}, WeightsDir: causalCopy(t)})
	if got := p.Info().GenerationModes; !slices.Equal(got, engine.GenerationModes) {
		t.Fatalf("Info().GenerationModes = %v, want %v", got, engine.GenerationModes)
	}
	n := 12
	if testing.Short() {
		n = 4
	}
	changed := 0
	for i := range n {
		run := &f.Runs[i]
		prep := prepareRun(t, p, run)
		pred, err := p.Generate(context.Background(), prep)
		if err != nil {
			t.Fatal(err)
		}
		if pred.GenerationMode != engine.GenerationHybrid {
			t.Fatalf("%s: ran in %s", run.Case, pred.GenerationMode)
		}
		want := upstreamCausalLoop(t, p, prepareRun(t, p, run))
		if !slices.Equal(pred.Tokens, want) {
			t.Errorf("%s: causal blocks give\n %v\nupstream's loop\n %v", run.Case, pred.Tokens, want)
		}
		if !slices.Equal(pred.Tokens, run.Tokens) {
			changed++
		}
	}
	t.Logf("%d scenes the same as upstream's causal loop; %d of them differ from the both-ways mask's tokens", n, changed)
	if changed == 0 {
		t.Error("no scene decodes differently with causal_attn: the flag does not reach the block mask")
	}
}
