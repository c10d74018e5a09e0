package jobs

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/engine/pipeline"
	"github.com/locateanything/detect/internal/imagemem"
	"github.com/locateanything/detect/internal/testimage"
	"github.com/locateanything/detect/internal/testwait"
)

// Issue 23, defect 3: ten jobs whose image is a 0.3 MB, 8000x5000 16-bit RGBA PNG (inside
// the 40-megapixel limit) took a worker from 60 MB to 5.9 GB, growing with prefetch x
// chips. Now every job reserves its image's decoded size, read from the header, in one
// budget all Runners of the process share, before it decodes: two chips holding eight
// messages prepare no more such images at once than the budget holds, the rest wait, and
// an image that alone needs more than the budget fails at once with image_too_large and a
// dead-letter record. Nothing is lost.
func TestDecodedBytesBudgetBoundsImagesInFlight(t *testing.T) {
	e := newTestEnv(t, testTopology())
	big := testimage.UniformPNG(6000, 4000, true) // 24 MP, 16-bit RGBA: 192 MB decoded
	huge := testimage.UniformPNG(8000, 5000, true)
	cost, _, _ := imagemem.Cost(big, false)
	budget := imagemem.NewBudget(2*cost + cost/2) // two at a time
	if hugeCost, _, _ := imagemem.Cost(huge, true); hugeCost <= budget.Size() {
		t.Fatalf("the over-budget image costs %d, within the budget of %d", hugeCost, budget.Size())
	}
	bigURL := e.putImage(t, "big.png", big)
	hugeURL := e.putImage(t, "huge.png", huge)

	// Prepare is where the engine decodes: each call checks that the images being prepared
	// hold their reservations and that those stay within the budget, and takes a while.
	var preparing, most atomic.Int64
	var mu sync.Mutex
	var broken []string
	onCall := func(method, _ string) {
		if method != "Prepare" {
			return
		}
		n := preparing.Add(1)
		defer preparing.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if s := budget.Stats(); s.Used > budget.Size() || s.Used < n*cost {
			mu.Lock()
			broken = append(broken, fmt.Sprintf("%d preparing with %d of %d bytes reserved", n, s.Used, budget.Size()))
			mu.Unlock()
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 2 { // two chips, one budget
		eng := enginetest.New()
		eng.OnCall = onCall
		cfg := e.runnerConfig(fmt.Sprintf("chip%d", i))
		cfg.Prefetch = 4
		cfg.ImageMemory = budget
		startRunner(t, e.topo, e.store, eng, cfg)
	}

	const jobs = 12
	for i := range jobs {
		e.publishJob(t, Job{ID: fmt.Sprintf("big-%d", i), Image: bigURL, Query: "dog"})
	}
	e.publishJob(t, Job{ID: "huge-overlay", Image: hugeURL, Query: "dog", Overlay: true})
	for i := range jobs {
		if res := e.publishedResult(t, DefaultBatch, fmt.Sprintf("big-%d", i)); res.Status != StatusSucceeded {
			t.Errorf("big-%d: %s %+v", i, res.Status, res.Error)
		}
	}
	res := e.publishedResult(t, DefaultBatch, "huge-overlay")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != engine.CodeImageTooLarge ||
		!strings.Contains(res.Error.Message, "8000x5000") || !strings.Contains(res.Error.Message, "LA_MAX_DECODED_BYTES") {
		t.Errorf("an image over the whole budget: %s %+v; want failed, image_too_large, naming its size and LA_MAX_DECODED_BYTES", res.Status, res.Error)
	}
	if rec := e.dlqRecord(t, "huge-overlay"); rec == nil {
		t.Error("the image over the budget has no dead-letter record")
	}
	testwait.Until(t, 30*time.Second, "the queue to drain and the budget to be returned", func() bool {
		return e.queueDrained(t) && budget.Stats().Used == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, b := range broken {
		t.Error(b)
	}
	s := budget.Stats()
	if most.Load() > 2 || s.Peak > budget.Size() {
		t.Errorf("%d images prepared at once, %d bytes reserved at most; the budget of %d holds 2", most.Load(), s.Peak, budget.Size())
	}
	if s.Waits == 0 {
		t.Error("with 8 messages held and room for 2 images, no job waited for the budget")
	}
}

// A job waiting for image memory is still the job: a cancel request ends its wait (and
// the job, canceled), and so does its deadline (expired), without holding any memory.
func TestJobWaitingForImageMemoryCanBeCanceledOrExpire(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := testimage.UniformPNG(4000, 2500, true)
	url := e.putImage(t, "big.png", img)
	cost, _, _ := imagemem.Cost(img, false)
	budget := imagemem.NewBudget(cost)
	if err := budget.Acquire(t.Context(), cost); err != nil { // someone else holds it all
		t.Fatal(err)
	}
	cfg := e.runnerConfig("w")
	cfg.ImageMemory = budget
	startRunner(t, e.topo, e.store, enginetest.New(), cfg)

	deadline := time.Now().Add(1500 * time.Millisecond)
	e.publishJob(t, Job{ID: "waits-then-cancelled", Image: url, Query: "dog"})
	e.publishJob(t, Job{ID: "waits-past-deadline", Image: url, Query: "dog", Deadline: &deadline})
	testwait.Until(t, 30*time.Second, "both jobs to wait for memory", func() bool { return budget.Stats().Waiting == 2 })
	if err := e.topo.State.RequestCancel(t.Context(), "waits-then-cancelled", "test"); err != nil {
		t.Fatal(err)
	}
	if res := e.publishedResult(t, DefaultBatch, "waits-then-cancelled"); res.Status != StatusCanceled {
		t.Errorf("cancelled while waiting for memory: %s %+v", res.Status, res.Error)
	}
	if res := e.publishedResult(t, DefaultBatch, "waits-past-deadline"); res.Status != StatusExpired {
		t.Errorf("deadline passed while waiting for memory: %s %+v", res.Status, res.Error)
	}
	if s := budget.Stats(); s.Used != cost || s.Waiting != 0 {
		t.Errorf("after both ended: %d bytes used, %d waiting; want only the holder's %d", s.Used, s.Waiting, cost)
	}
	budget.Release(cost)
}

// Issue 23, defect 7: with LA_GRACE=2s and four large PNGs being decoded, the worker took
// 21.6 s to exit. Now the real engine's decode stops when the grace period ends: the
// Runner returns promptly and gives the jobs back, unfinished, for another worker.
func TestShutdownDoesNotWaitForImageDecoding(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 5 * time.Minute, MaxDeliver: 5})
	img := testimage.UniformPNG(8000, 5000, true) // 40 MP, 16-bit RGBA: 320 MB and seconds to decode
	url := e.putImage(t, "big.png", img)
	cost, _, _ := imagemem.Cost(img, false)
	budget := imagemem.NewBudget(2 * cost)
	cfg := e.runnerConfig("w")
	cfg.Prefetch, cfg.Grace, cfg.ImageMemory = 2, 300*time.Millisecond, budget
	r := startRunnerWith(t, e.topo, e.store, func() (engine.Engine, error) { return pipeline.Open(blocksOptions()) }, cfg)

	ids := []string{"decoding-0", "decoding-1"}
	for _, id := range ids {
		e.publishJob(t, Job{ID: id, Image: url, Query: "triangle"})
	}
	// Reserved: fetched, and handed to Prepare to decode.
	testwait.Until(t, 30*time.Second, "both images to be decoding", func() bool { return budget.Stats().Used == 2*cost })
	time.Sleep(100 * time.Millisecond) // well into the decoding, seconds from its end

	start := time.Now()
	r.stop(t) // the Runner's context ends (SIGTERM), then its chip closes
	took := time.Since(start)
	t.Logf("stopped %v after SIGTERM, grace %v", took, cfg.Grace)
	if limit := cfg.Grace + 2*time.Second; took > limit {
		t.Errorf("the Runner stopped %v after its context ended; with a grace of %v it should take under %v", took, cfg.Grace, limit)
	}
	for _, id := range ids {
		st, _, err := e.topo.State.Get(t.Context(), id)
		if err != nil || st.Status.Terminal() {
			t.Errorf("%s after the cut-off: %+v (%v); want it given back, not ended", id, st, err)
		}
	}
	if s := budget.Stats(); s.Used != 0 {
		t.Errorf("%d bytes still reserved after the Runner stopped", s.Used)
	}
	runtime.GC() // the decoded images are garbage: let the next test have the memory
}
