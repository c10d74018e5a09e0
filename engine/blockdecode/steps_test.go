package blockdecode_test

import (
	"slices"
	"testing"

	"github.com/locateanything/detect/engine/blockdecode"
	"github.com/locateanything/detect/engine/blockdecode/golden"
)

// Every step the reference took on the block-trained test model's 96 scenes (and on the
// random checkpoints), decided again from the rows it recorded: the reading, its new
// tokens, the pattern, what was committed after the stop rules, and the mode switches.
func TestStepsMatchTheReference(t *testing.T) {
	for _, name := range []string{"tiny-shapes-blocks.json", "tiny-bf16.json", "tiny-f32.json"} {
		f, err := golden.Load(golden.Dir + name)
		if err != nil {
			t.Fatal(err)
		}
		tok := f.TokenIDs.Tokens()
		paths := map[string]int{}
		for _, run := range f.Runs {
			generated, block := 0, true
			for i, s := range run.Steps {
				left := run.MaxNew - generated
				rows := s.Rows(tok, blockdecode.K)
				var d blockdecode.Decision
				if block != (s.Kind == "block") {
					t.Fatalf("%s %s %s step %d: %s step, the loop is in block mode %v", name, run.Case, run.Mode, i, s.Kind, block)
				}
				if block {
					d, err = blockdecode.Block(rows, tok, run.Mode, left)
					if err != nil {
						t.Fatal(err)
					}
					if d.Reading.Path != s.Path || !slices.Equal(d.Reading.NewTokens[:], s.NewTokens) || !slices.Equal(d.Reading.X0[:], s.X0) {
						t.Fatalf("%s %s %s step %d: read %s %v (x0 %v), reference %s %v (x0 %v)", name, run.Case, run.Mode, i,
							d.Reading.Path, d.Reading.NewTokens, d.Reading.X0, s.Path, s.NewTokens, s.X0)
					}
					if d.Reading.Frame != s.Box.Frame {
						t.Fatalf("%s %s step %d: frame %s, reference %s", name, run.Case, i, d.Reading.Frame, s.Box.Frame)
					}
				} else {
					d, err = blockdecode.AR(rows[0], tok, run.Mode, left)
					if err != nil {
						t.Fatal(err)
					}
				}
				paths[string(s.Kind)+"/"+string(s.Type)]++
				if d.Type != s.Type || !slices.Equal(d.Commit, s.Committed) || !slices.Equal(d.CutFrom, s.CutFrom) {
					t.Fatalf("%s %s %s step %d: %s %v (cut from %v), reference %s %v (cut from %v)", name, run.Case, run.Mode, i,
						d.Type, d.Commit, d.CutFrom, s.Type, s.Committed, s.CutFrom)
				}
				generated += len(d.Commit)
				last := i == len(run.Steps)-1
				if (d.Stop || generated >= run.MaxNew) != last {
					t.Fatalf("%s %s step %d: stop %v with %d of %d generated, but the reference's last step is %d",
						name, run.Case, i, d.Stop, generated, run.MaxNew, len(run.Steps)-1)
				}
				if d.ToAR {
					block = false
				}
				if d.ToBlocks {
					block = true
				}
			}
			if generated != len(run.Tokens) {
				t.Fatalf("%s %s: %d tokens, reference %d", name, run.Case, generated, len(run.Tokens))
			}
		}
		t.Logf("%s: %d runs, steps by type %v", name, len(f.Runs), paths)
	}
}
