package jobs

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/prompt"
)

// TestResultCarriesScoresAndWarnings: a job's result has the score of every box, the
// engine's own, in what is published and what is stored, and says what looks wrong with a
// query that ran as written.
func TestResultCarriesScoresAndWarnings(t *testing.T) {
	e := newTestEnv(t, testTopology())
	image := e.putImage(t, "dog.jpg", photo(t, "dog.jpg"))
	queries := map[string]string{"plain": "dog</c>kite", "commas": "dog, kite", "trailing": "dog</c>"}

	want := map[string]*engine.Prediction{}
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p, err := pipeline.Open(simOptions(1))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for id, q := range queries {
			prep, err := p.Prepare(t.Context(), engine.Request{Image: photo(t, "dog.jpg"), Query: q})
			if err != nil {
				t.Fatal(err)
			}
			if want[id], err = p.Generate(t.Context(), prep); err != nil {
				t.Fatal(err)
			}
		}
	}()

	startRunnerWith(t, e.topo, e.store, openSim(1), e.runnerConfig("w1"))
	for id, q := range queries {
		e.publishJob(t, Job{ID: id, Image: image, Query: q})
	}
	for id, q := range queries {
		for where, res := range map[string]Result{
			"published": e.publishedResult(t, DefaultBatch, id),
			"stored":    e.storedResult(t, defaultOutput, id),
		} {
			if res.Status != StatusSucceeded || len(res.Detections) == 0 {
				t.Fatalf("%s %s: %s %+v with %d detections", where, id, res.Status, res.Error, len(res.Detections))
			}
			if !reflect.DeepEqual(res.Detections, want[id].Detections) {
				t.Errorf("%s %s: detections %+v, the engine's %+v", where, id, res.Detections, want[id].Detections)
			}
			for _, d := range res.Detections {
				if !(d.Score >= 0.5 && d.Score <= 1) {
					t.Errorf("%s %s: box %v scored %v, want the simulated chip's 0.5..1", where, id, d.BoxNorm, d.Score)
				}
			}
			if id == "plain" && res.Warnings != nil {
				t.Errorf("%s %s: warnings %q for %q", where, id, res.Warnings, q)
			}
			if id != "plain" && (len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], q)) {
				t.Errorf("%s %s: warnings %q for %q, want one about it", where, id, res.Warnings, q)
			}
		}
	}
}

// TestResultWarningsAreBounded: a 1 KB job whose query is 250 </c> made a 279 KB result,
// 251 warnings each quoting the whole query (#23, defect 10); its result now carries a few
// short warnings.
func TestResultWarningsAreBounded(t *testing.T) {
	e := newTestEnv(t, testTopology())
	image := e.putImage(t, "dog.jpg", photo(t, "dog.jpg"))
	startRunnerWith(t, e.topo, e.store, openSim(1), e.runnerConfig("w1"))
	e.publishJob(t, Job{ID: "empties", Image: image, Query: strings.Repeat("</c>", 250)})
	for where, res := range map[string]Result{
		"published": e.publishedResult(t, DefaultBatch, "empties"),
		"stored":    e.storedResult(t, defaultOutput, "empties"),
	} {
		size := 0
		for _, w := range res.Warnings {
			size += len(w)
		}
		if res.Status != StatusSucceeded || len(res.Warnings) == 0 || len(res.Warnings) > prompt.MaxWarnings || size > 2000 {
			t.Errorf("%s: %s %+v, %d warnings of %d bytes in all, want 1..%d short ones", where, res.Status, res.Error,
				len(res.Warnings), size, prompt.MaxWarnings)
		}
	}
}
