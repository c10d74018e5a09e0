package native

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/checkpoint"
)

// The acceptance rules read top-k lists whose order on equal probabilities must be
// ascending id (docs/hybrid-decoding.md). Random weights never tie, so this test makes a
// checkpoint that does: groups of LM-head rows set to one vector (their logits are the same
// bits, so their probabilities are equal), the other rows scaled down to nearly nothing
// so that one group or the other always leads.

// tieGroups are the ids whose head rows are w (first group) and -w (second): spread over
// the vocabulary, so that they fall in different threads' slices of it.
var tieGroups = [2][]int32{{151000, 9, 2, 77}, {5, 151600, 50}}

// writeTiedHead writes the f32 fixture checkpoint with an LM head whose tieGroups rows are
// w and -w and whose other rows are a millionth of what they were.
func writeTiedHead(t *testing.T) string {
	t.Helper()
	dir := tinyCheckpoint{dtype: checkpoint.F32, lmHead: true}.write(t)
	path := filepath.Join(dir, checkpoint.SingleFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(raw)
	var header map[string]struct {
		Shape   []int `json:"shape"`
		Offsets []int `json:"data_offsets"`
	}
	if err := json.Unmarshal(raw[8:8+hlen], &header); err != nil {
		t.Fatal(err)
	}
	h, ok := header[checkpoint.LMHeadName]
	if !ok || len(h.Shape) != 2 {
		t.Fatalf("fixture has no [vocab, hidden] %s", checkpoint.LMHeadName)
	}
	vocab, hidden := h.Shape[0], h.Shape[1]
	head := raw[8+int(hlen)+h.Offsets[0] : 8+int(hlen)+h.Offsets[1]]
	at := func(id, j int) []byte { return head[4*(id*hidden+j):] }
	for id := range vocab {
		for j := range hidden {
			f := math.Float32frombits(binary.LittleEndian.Uint32(at(id, j)))
			binary.LittleEndian.PutUint32(at(id, j), math.Float32bits(f*1e-6))
		}
	}
	rng := rand.New(rand.NewPCG(4, 4))
	w := make([]float32, hidden)
	for j := range w {
		w[j] = 2*rng.Float32() - 1
	}
	for g, ids := range tieGroups {
		sign := float32(1 - 2*g)
		for _, id := range ids {
			for j := range hidden {
				binary.LittleEndian.PutUint32(at(int(id), j), math.Float32bits(sign*w[j]))
			}
		}
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkTiedRow holds a row to the tie rule: it starts with one group's ids in ascending
// order, all of the same probability, more probable than anything after them. It returns
// which group leads.
func checkTiedRow(t *testing.T, what string, row engine.StepRow) int {
	t.Helper()
	for g, ids := range tieGroups {
		if !slices.Contains(ids, row.TopIDs[0]) {
			continue
		}
		want := slices.Sorted(slices.Values(ids))
		n := len(want)
		if !slices.Equal(row.TopIDs[:n], want) {
			t.Fatalf("%s: top ids %v, want the tied group %v first, in ascending order", what, row.TopIDs, want)
		}
		for a := 1; a < n; a++ {
			if math.Float32bits(row.TopProbs[a]) != math.Float32bits(row.TopProbs[0]) {
				t.Fatalf("%s: tied ids have probabilities %v", what, row.TopProbs[:n])
			}
		}
		if !(row.TopProbs[n] < row.TopProbs[0]) {
			t.Fatalf("%s: id %d after the tied group is as probable (%g) as the group (%g)", what, row.TopIDs[n], row.TopProbs[n], row.TopProbs[0])
		}
		return g
	}
	t.Fatalf("%s: top ids %v start with neither tied group %v", what, row.TopIDs, tieGroups)
	return -1
}

// TestStepTopKTies: equal probabilities rank in ascending id order, in AR rows and block
// rows, across the threads' slices of the vocabulary, and decode's greedy token is the
// lowest id of a tie too.
func TestStepTopKTies(t *testing.T) {
	lockThread(t)
	m := openModel(t, writeTiedHead(t))
	o := Options{MaxBatch: 1, MaxSeqLen: 96, Threads: 2}
	b, dec := openBackend(t, m, o), openBackend(t, m, o)
	prompt := testPrompt(0)
	tok, _, err := prefillStep(dec, 0, prompt)
	if err != nil {
		t.Fatal(err)
	}
	if err := prefillCacheStep(b, 0, prompt); err != nil {
		t.Fatal(err)
	}
	// The first block: its row 0 repeats the last prompt token.
	leads := map[int]int{}
	block := []int32{prompt[len(prompt)-1], 151676, 151676, 151676, 151676, 151676}
	rows, err := runStep(b, []engine.StepSlot{{Slot: 0, Block: block}}, engine.StepMaxK, nil)
	if err != nil {
		t.Fatal(err)
	}
	for r, row := range rows {
		leads[checkTiedRow(t, fmt.Sprintf("first block row %d", r), row)]++
	}
	for step := range 20 {
		rows, err := runStep(b, []engine.StepSlot{{Slot: 0, Pending: []int32{tok}}}, engine.StepMaxK, nil)
		if err != nil {
			t.Fatal(err)
		}
		leads[checkTiedRow(t, fmt.Sprintf("AR step %d", step), rows[0])]++
		next, err := decode1(dec, tok)
		if err != nil {
			t.Fatal(err)
		}
		if next != rows[0].TopIDs[0] {
			t.Fatalf("AR step %d: decode's token %d, the step's first id %d", step, next, rows[0].TopIDs[0])
		}
		// Vary the input so that both groups get to lead.
		tok = int32(1000 + 7919*step%150000)
		if _, err := decode1(dec, tok); err != nil {
			t.Fatal(err)
		}
		if _, err := runStep(b, []engine.StepSlot{{Slot: 0, Pending: []int32{tok}}}, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("rows led by each group: %v", leads)
	if leads[0] == 0 || leads[1] == 0 {
		t.Errorf("only one group ever led (%v): the test did not see both", leads)
	}
}
