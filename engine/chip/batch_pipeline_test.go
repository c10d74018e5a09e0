package chip_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/chip"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/engine/sim"
	"github.com/locateanything/detect/tools/tinymodel/shapes"
)

// mixedRequests is a batch's worth of different work: the repository's photographs and
// shape scenes, several tasks and queries, budgets from 1 token to 40, so sequences join
// and leave the batch at different steps.
func mixedRequests(t *testing.T, n int) []engine.Request {
	t.Helper()
	var images [][]byte
	for _, name := range []string{"dog.jpg", "kite.jpg", "person.jpg"} {
		data, err := os.ReadFile("../../testdata/images/" + name)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, data)
	}
	r := rand.New(rand.NewPCG(13, 13))
	var queries []engine.Request
	for i := range 6 {
		s := shapes.NewScene(r)
		var buf bytes.Buffer
		if err := png.Encode(&buf, s.Image); err != nil {
			t.Fatal(err)
		}
		images = append(images, buf.Bytes())
		q := shapes.NewQuery(r, s)
		queries = append(queries, engine.Request{Query: q.Text, Task: engine.Task(q.Task)})
		_ = i
	}
	queries = append(queries,
		engine.Request{Query: "dog</c>person", Task: engine.TaskDetect},
		engine.Request{Query: "the kite", Task: engine.TaskGroundOne},
		engine.Request{Query: "", Task: engine.TaskText})
	budgets := []int{1, 2, 5, 9, 17, 40}
	reqs := make([]engine.Request, n)
	for i := range reqs {
		q := queries[i%len(queries)]
		q.Image = images[(i*5)%len(images)]
		q.MaxNewTokens = budgets[(i*7)%len(budgets)]
		reqs[i] = q
	}
	return reqs
}

// answer is what batching must not change: the tokens, their probabilities, and the
// boxes and points with their scores.
type answer struct {
	Tokens     []int32
	Probs      []float32
	Detections []engine.Detection
	Points     []engine.Point
}

func answerOf(p *engine.Prediction) answer {
	return answer{p.Tokens, p.Probs, p.Detections, p.Points}
}

// alone answers every request one at a time on a batch-1 pipeline: the reference.
func alone(t *testing.T, o pipeline.OpenOptions, reqs []engine.Request) []answer {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	o.MaxBatch = 1
	p, err := pipeline.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := make([]answer, len(reqs))
	for i, req := range reqs {
		prep, err := p.Prepare(context.Background(), req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		pred, err := p.Generate(context.Background(), prep)
		if err != nil {
			t.Fatalf("request %d alone: %v", i, err)
		}
		out[i] = answerOf(pred)
	}
	return out
}

// TestBatchedAnswersEqualAnswersAlone runs many mixed requests through one chip that
// batches them (interactive and queued ones together, one of them cancelled halfway) and
// checks every answer token for token, probability for probability and score for score
// against the same request run alone.
func TestBatchedAnswersEqualAnswersAlone(t *testing.T) {
	for _, c := range []struct {
		name, backend, dir string
	}{
		{"tiny-bf16", "cpu", "../../testdata/checkpoints/tiny-bf16"},
		{"tiny-f32", "cpu", "../../testdata/checkpoints/tiny-f32"},
		{"bundled", "cpu", "../../models/tiny-shapes"},
		{"sim", "sim", "../../models/tiny-shapes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := pipeline.OpenOptions{
				Settings:   engine.Settings{Backend: engine.BackendKind(c.backend), Threads: 2, MaxSeqLen: 1024, InTokenLimit: 64, CanonGrid: "native", MaxNewTokens: 8, MaxNewTokensCap: 64},
				WeightsDir: c.dir,
				// The simulated chip at 10x its speed (slow enough that the requests overlap on a
				// loaded machine): its answers, not its timing, are checked.
				Sim: sim.Costs{Vision: 49 * time.Millisecond, Prefill: 58 * time.Millisecond,
					Decode: 23 * time.Millisecond, BatchAlpha: 0.1, Speed: 10},
			}
			reqs := mixedRequests(t, 24)
			want := alone(t, o, reqs)
			o.MaxBatch = 4
			checkBatched(t, o, reqs, want)
		})
	}
}

func checkBatched(t *testing.T, o pipeline.OpenOptions, reqs []engine.Request, want []answer) {
	t.Helper()
	c, err := chip.Open(func() (engine.Engine, error) { return pipeline.Open(o) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	victimCtx, cancelVictim := context.WithCancel(context.Background())
	defer cancelVictim()
	const victim = 3 // a long one, cancelled once it has started

	// Host work first, so the requests reach the chip together.
	preps := make([]*engine.Prepared, len(reqs))
	for i, req := range reqs {
		if i == victim {
			req.MaxNewTokens = 64
		}
		prep, err := c.Engine().Prepare(context.Background(), req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		preps[i] = prep
	}
	var wg sync.WaitGroup
	got := make([]answer, len(reqs))
	errs := make([]error, len(reqs))
	maxBatch := 0
	var mu sync.Mutex
	for i, prep := range preps {
		wg.Go(func() {
			ctx := context.Background()
			if i == victim {
				ctx = victimCtx
			}
			prio := chip.Batch
			if i%3 == 0 {
				prio = chip.Interactive
			}
			pred, err := c.Generate(ctx, prio, prep)
			if err != nil {
				errs[i] = err
				return
			}
			got[i] = answerOf(pred)
			mu.Lock()
			maxBatch = max(maxBatch, pred.Batch)
			mu.Unlock()
		})
	}
	// Cancel the victim once sequences run together.
	answered := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		for c.Running() < 2 {
			select {
			case <-answered:
				return
			default:
				runtime.Gosched()
			}
		}
		cancelVictim()
	})
	wg.Wait()
	close(answered)
	watcher.Wait()

	for i := range reqs {
		if i == victim {
			if errs[i] != nil && !errors.Is(errs[i], context.Canceled) {
				t.Errorf("the cancelled request: %v, want context.Canceled or an answer", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
			continue
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("request %d (%q, budget %d) batched:\n%+v\nalone:\n%+v", i, reqs[i].Query, reqs[i].MaxNewTokens, got[i], want[i])
		}
	}
	if maxBatch < 2 {
		t.Errorf("the chip never decoded more than %d sequences together", maxBatch)
	}
}
