package engine

import "testing"

// A slot's output rows: one for an empty Block, nil or not (the C side reads n_block 0 as
// an AR row), len(Block) otherwise. Counting an empty non-nil Block as zero rows would
// shift every later slot's rows.
func TestStepRowsCountsAnEmptyBlockAsOneRow(t *testing.T) {
	slots := []StepSlot{
		{Slot: 0, Pending: []int32{5}},
		{Slot: 1, Pending: []int32{6}, Block: []int32{}},
		{Slot: 2, Pending: []int32{7, 8}, Block: []int32{8, 9, 9, 9, 9, 9}},
	}
	if got := StepRows(slots); got != 8 {
		t.Fatalf("StepRows = %d, want 1 + 1 + 6", got)
	}
	rows := NewStepRows(8, 5, 3)
	for i, r := range rows {
		if len(r.TopIDs) != 5 || len(r.TopProbs) != 5 || len(r.Watch) != 3 {
			t.Fatalf("row %d: %d ids, %d probabilities, %d watched", i, len(r.TopIDs), len(r.TopProbs), len(r.Watch))
		}
	}
	rows[0].TopProbs = append(rows[0].TopProbs, 1) // capped: must not write into row 1
	rows[0].Watch = append(rows[0].Watch, 1)
	if rows[1].TopProbs[0] != 0 || rows[1].Watch[0] != 0 {
		t.Fatal("rows share backing memory past their length")
	}
}
