package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/locateanything/detect/jobs"
)

// TestIndexKeepsTheLatestResultAndForgetsTheOldest: a job's new result replaces its old
// one in the counts and the gallery, and past its bound the index forgets the oldest
// results, batches included, with every count following.
func TestIndexKeepsTheLatestResultAndForgetsTheOldest(t *testing.T) {
	x := newIndex(3000)
	fill(x, "a", 2000)
	if st := x.batchList(nil)[0]; st.Total != 2000 || st.Failed != 400 || st.Succeeded != 1600 {
		t.Fatalf("batch a: %+v", st)
	}
	// a-0000004 failed; its replay succeeds.
	x.add(&jobs.Result{ID: "a-0000004", Batch: "a", Status: jobs.StatusSucceeded, FinishedAt: time.Now()}, 100, 5000, time.Now())
	if st := x.batchList(nil)[0]; st.Total != 2000 || st.Failed != 399 || st.Succeeded != 1601 {
		t.Errorf("after a replay: %+v", st)
	}
	g, _ := x.gallery("a", filter{status: "succeeded"}, 17, 100)
	if g.Total != 1601 || g.Items[len(g.Items)-1].ID != "a-0000004" {
		t.Errorf("succeeded: total %d, last %v; want 1601, the replayed job last", g.Total, g.Items[len(g.Items)-1].ID)
	}
	fill(x, "b", 2000) // 4000 in all: the oldest 1000 of a go
	lists := x.batchList(nil)
	total := 0
	for _, b := range lists {
		total += b.Total
	}
	if total != 3000 || len(x.byID) != 3000 {
		t.Errorf("after 4000 results with room for 3000: %d counted, %d held", total, len(x.byID))
	}
	if _, ok := x.lookup("a-0000001"); ok {
		t.Error("the oldest result is still held")
	}
	fill(x, "c", 3000)
	if _, ok := x.batches["a"]; ok {
		t.Error("batch a is still listed after all its results were forgotten")
	}
	for i := range 3000 {
		if _, ok := x.lookup(fmt.Sprintf("c-%07d", i)); !ok {
			t.Fatalf("c-%07d is not held", i)
		}
	}
}
