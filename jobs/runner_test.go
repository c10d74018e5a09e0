package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/jpeg"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/engine/overlay"
	"github.com/locateanything/detect/internal/testimage"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/storage"
)

func testTopology() TopologyConfig {
	return TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 5}
}

func TestHappyPathStoresAndPublishesResult(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	want, err := eng.Answer(engine.Request{Image: readTestdata(t, "dog.jpg"), Query: "dog</c>bicycle"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.runnerConfig("w1")
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	startRunner(t, e.topo, e.store, eng, cfg)

	e.publishJob(t, Job{ID: "job-1", Image: img, Query: "dog</c>bicycle", Overlay: true,
		Batch: "b1", Metadata: json.RawMessage(`{"camera":"04"}`)})
	res := e.publishedResult(t, "b1", "job-1")
	if res.Status != StatusSucceeded || res.Error != nil {
		t.Fatalf("status %s, error %+v; want succeeded", res.Status, res.Error)
	}
	if res.Width != 768 || res.Height != 576 || len(res.Detections) != 2 || !reflect.DeepEqual(res.Detections, want.Detections) {
		t.Errorf("prediction not carried over: %dx%d %+v, want 768x576 %+v", res.Width, res.Height, res.Detections, want.Detections)
	}
	if res.Attempt != 1 || res.Worker != "w1" || res.Batch != "b1" || res.Task != engine.TaskDetect || res.Image != img {
		t.Errorf("job fields: attempt %d worker %q batch %q task %q image %q", res.Attempt, res.Worker, res.Batch, res.Task, res.Image)
	}
	if string(res.Metadata) != `{"camera":"04"}` {
		t.Errorf("metadata %s, want it echoed", res.Metadata)
	}
	if res.TimingMS.Decode != want.TimingMS.Decode || res.TimingMS.Fetch <= 0 || res.TimingMS.Total < res.TimingMS.Fetch {
		t.Errorf("timings %+v, want the engine's decode time %v", res.TimingMS, want.TimingMS.Decode)
	}
	wantOverlay := OverlayURL(defaultOutput, "job-1", overlay.PNG)
	if res.OverlayURL == nil || *res.OverlayURL != wantOverlay || !strings.HasSuffix(wantOverlay, "/job-1.png") {
		t.Fatalf("overlay %v, want %s", res.OverlayURL, wantOverlay)
	}
	if res.OverlayFormat != overlay.PNG {
		t.Errorf("overlay_format %q, want png (the default)", res.OverlayFormat)
	}
	if png, err := e.store.Get(t.Context(), wantOverlay, 0); err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Errorf("overlay not stored as PNG: %v", err)
	}
	if obj, err := e.store.Stat(t.Context(), wantOverlay); err != nil || obj.ContentType != "image/png" {
		t.Errorf("overlay stored as %q (%v), want image/png", obj.ContentType, err)
	}
	stored := e.storedResult(t, defaultOutput, "job-1")
	if stored.ID != "job-1" || stored.Status != StatusSucceeded || stored.RawText != res.RawText {
		t.Errorf("stored result %+v differs from the published one", stored)
	}
	testwait.Until(t, 30*time.Second, "the job to be acked", func() bool { return e.queueDrained(t) })
	st, ok, err := e.topo.State.Get(t.Context(), "job-1")
	if err != nil || !ok || st.Status != StatusSucceeded || st.Worker != "w1" || st.Attempt != 1 {
		t.Errorf("state %+v ok=%v err=%v; want succeeded by w1", st, ok, err)
	}
	if e.dlqRecord(t, "job-1") != nil {
		t.Error("a succeeded job has a DLQ record")
	}
	if n := counterValue(t, cfg.Metrics.Jobs.WithLabelValues(OutcomeSucceeded)); n != 1 {
		t.Errorf("la_jobs_total{outcome=succeeded} = %v, want 1", n)
	}
	var m dto.Metric
	if err := cfg.Metrics.Stage.WithLabelValues("total").(prometheus.Histogram).Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("total-stage histogram: %v samples (%v); want 1", m.GetHistogram().GetSampleCount(), err)
	}
}

// A job asking for a JPEG overlay gets <id>.jpg, a JPEG of the image's size stored as
// image/jpeg, and a result that says so; a job without an overlay says nothing of one.
func TestJPEGOverlay(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))

	e.publishJob(t, Job{ID: "jpeg-1", Image: img, Query: "dog</c>bicycle", Overlay: true, OverlayFormat: overlay.JPEG})
	e.publishJob(t, Job{ID: "no-overlay", Image: img, Query: "dog", OverlayFormat: overlay.JPEG})
	res := e.publishedResult(t, DefaultBatch, "jpeg-1")
	if res.Status != StatusSucceeded {
		t.Fatalf("status %s, error %+v; want succeeded", res.Status, res.Error)
	}
	want := OverlayURL(defaultOutput, "jpeg-1", overlay.JPEG)
	if res.OverlayURL == nil || *res.OverlayURL != want || !strings.HasSuffix(want, "/jpeg-1.jpg") || res.OverlayFormat != overlay.JPEG {
		t.Fatalf("overlay %v format %q, want %s jpeg", res.OverlayURL, res.OverlayFormat, want)
	}
	if stored := e.storedResult(t, defaultOutput, "jpeg-1"); stored.OverlayFormat != overlay.JPEG || stored.OverlayURL == nil || *stored.OverlayURL != want {
		t.Errorf("stored result: overlay %v format %q", stored.OverlayURL, stored.OverlayFormat)
	}
	data, err := e.store.Get(t.Context(), want, 0)
	if err != nil || !bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}) {
		t.Fatalf("overlay not stored as JPEG: %v (% x)", err, data[:min(4, len(data))])
	}
	if obj, err := e.store.Stat(t.Context(), want); err != nil || obj.ContentType != "image/jpeg" {
		t.Errorf("overlay stored as %q (%v), want image/jpeg", obj.ContentType, err)
	}
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err != nil || cfg.Width != 768 || cfg.Height != 576 {
		t.Errorf("overlay JPEG %dx%d (%v), want the image's 768x576", cfg.Width, cfg.Height, err)
	}
	if _, err := e.store.Stat(t.Context(), OverlayURL(defaultOutput, "jpeg-1", overlay.PNG)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a PNG overlay was stored too: %v", err)
	}
	if res := e.publishedResult(t, DefaultBatch, "no-overlay"); res.Status != StatusSucceeded || res.OverlayURL != nil || res.OverlayFormat != "" {
		t.Errorf("no-overlay: status %s overlay %v format %q; want succeeded without an overlay", res.Status, res.OverlayURL, res.OverlayFormat)
	}
}

func TestUnusableOutputFailsWithoutRetry(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))

	e.publishJob(t, Job{ID: "bad-output", Image: img, Query: "dog", Output: "ftp://elsewhere/out/"})
	res := e.publishedResult(t, DefaultBatch, "bad-output")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeBadURL || res.Attempt != 1 {
		t.Fatalf("status %s error %+v attempt %d; want failed bad_url on the first delivery", res.Status, res.Error, res.Attempt)
	}
	if rec := e.dlqRecord(t, "bad-output"); rec == nil || rec.Code != CodeBadURL || !strings.Contains(string(rec.Job), "ftp://elsewhere/out/") {
		t.Errorf("DLQ record %+v; want bad_url with the original job", rec)
	}
	// The output it asked for refuses: the result is stored under the worker's default.
	if res.ResultURL != ResultURL(defaultOutput, "bad-output") {
		t.Errorf("result_url %q; want the default output's", res.ResultURL)
	}
	if stored := e.storedResult(t, defaultOutput, "bad-output"); stored.Error == nil || stored.Error.Code != CodeBadURL {
		t.Errorf("stored result %+v; want the bad_url failure", stored.Error)
	}
}

func TestReplayedJobRunsAgainWithinTheDuplicateWindow(t *testing.T) {
	e := newTestEnv(t, testTopology())
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))

	j := Job{ID: "late-image", Image: "s3://images/late.jpg", Query: "dog"}
	e.publishJob(t, j)
	if res := e.publishedResult(t, DefaultBatch, j.ID); res.Status != StatusFailed || res.Error.Code != CodeNotFound {
		t.Fatalf("first run: %s %+v; want not_found", res.Status, res.Error)
	}
	testwait.Until(t, 30*time.Second, "the failure to be recorded", func() bool {
		st, _, _ := e.topo.State.Get(t.Context(), j.ID)
		return st.Status == StatusFailed
	})

	// What `submit dlq replay` does once the cause is fixed.
	e.putImage(t, "late.jpg", readTestdata(t, "dog.jpg"))
	if err := e.topo.State.Put(t.Context(), j.ID, State{Status: StatusQueued}); err != nil {
		t.Fatal(err)
	}
	if err := e.topo.State.ReleaseClaim(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(j)
	e.publish(t, b, j.ID+"-replay-1")
	testwait.Until(t, 60*time.Second, "the replayed job's result", func() bool {
		res := e.publishedResult(t, DefaultBatch, j.ID)
		return res.Status == StatusSucceeded
	})
	if got := e.storedResult(t, defaultOutput, j.ID); got.Status != StatusSucceeded {
		t.Errorf("stored result %s after the replay", got.Status)
	}
}

func TestResultGoesToJobOutput(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))

	e.publishJob(t, Job{ID: "own-output", Image: img, Query: "dog", Output: "s3://results/custom"})
	e.publishedResult(t, DefaultBatch, "own-output")
	if got := e.storedResult(t, "s3://results/custom/", "own-output"); got.Status != StatusSucceeded {
		t.Errorf("stored status %s", got.Status)
	}
}

func TestPoisonJobsFailOnFirstDelivery(t *testing.T) {
	e := newTestEnv(t, testTopology())
	good := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	empty := e.putImage(t, "empty.jpg", nil)
	corrupt := e.putImage(t, "corrupt.jpg", []byte("this is not an image at all, just text"))
	huge := e.putImage(t, "huge.png", testimage.PNGHeader(100000, 100000, 8, 2, 0))
	eng := enginetest.New()
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	job := func(id, image string) []byte {
		b, _ := json.Marshal(Job{ID: id, Image: image, Query: "dog"})
		return b
	}
	cases := []struct {
		id, code string
		data     []byte
	}{
		{"bad-json", CodeInvalidJob, []byte(`{"id": "bad-json", "image": `)},
		{"unknown-field", CodeInvalidJob, []byte(`{"id":"unknown-field","image":"` + good + `","query":"dog","colour":"red"}`)},
		{"bad-overlay-format", CodeInvalidJob, []byte(`{"id":"bad-overlay-format","image":"` + good + `","query":"dog","overlay":true,"overlay_format":"webp"}`)},
		{"bad-generation-mode", engine.CodeBadGeneration, []byte(`{"id":"bad-generation-mode","image":"` + good + `","query":"dog","generation_mode":"fast"}`)},
		{"unknown-scheme", CodeBadURL, job("unknown-scheme", "ftp://host/dog.jpg")},
		{"missing-object", CodeNotFound, job("missing-object", "s3://images/no-such.jpg")},
		{"empty-object", CodeEmptyImage, job("empty-object", empty)},
		{"corrupt-image", engine.CodeBadImage, job("corrupt-image", corrupt)},
		{"huge-image", engine.CodeImageTooLarge, job("huge-image", huge)},
	}
	for _, c := range cases {
		e.publish(t, c.data, c.id)
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			res := e.publishedResult(t, DefaultBatch, c.id)
			if res.Status != StatusFailed || res.Error == nil || res.Error.Code != c.code {
				t.Fatalf("status %s error %+v; want failed with %s", res.Status, res.Error, c.code)
			}
			if res.Error.Message == "" || res.Attempt != 1 {
				t.Errorf("error message %q attempt %d; want a reason after one delivery", res.Error.Message, res.Attempt)
			}
			if c.id == "bad-overlay-format" && !strings.Contains(res.Error.Message, `field overlay_format: "webp" is not one of [png jpeg]`) {
				t.Errorf("error message %q; want it to name the field and the formats", res.Error.Message)
			}
			if c.id == "bad-generation-mode" && !strings.Contains(res.Error.Message, `field generation_mode: "fast" is not one of [ar hybrid]`) {
				t.Errorf("error message %q; want it to name the field and the modes", res.Error.Message)
			}
			if stored := e.storedResult(t, defaultOutput, c.id); stored.Status != StatusFailed {
				t.Errorf("stored status %s", stored.Status)
			}
			rec := e.dlqRecord(t, c.id)
			if rec == nil {
				t.Fatal("no DLQ record")
			}
			if rec.Code != c.code || rec.Attempts != 1 || rec.Worker != "w1" || rec.Reason != res.Error.Message {
				t.Errorf("DLQ record %+v", rec)
			}
			var orig []byte = rec.Job
			if orig == nil {
				orig = rec.JobBase64
			}
			if string(orig) != string(c.data) {
				t.Errorf("DLQ keeps %q, want the original %q", orig, c.data)
			}
		})
	}
	testwait.Until(t, 30*time.Second, "every poison job to be terminated", func() bool { return e.queueDrained(t) })
	info, err := e.topo.Consumer.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 {
		t.Errorf("%d poison messages were redelivered; want none", info.NumRedelivered)
	}
	if n := eng.Calls("dog"); n != 0 {
		t.Errorf("the engine generated %d times for poison jobs", n)
	}
}

func TestEnginePanicFailsTheJobNotTheWorker(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	eng.OnCall = func(method, query string) {
		if method == "Prepare" && query == "panic" {
			panic("decoder bug")
		}
	}
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	e.publishJob(t, Job{ID: "crafted", Image: img, Query: "panic"})
	e.publishJob(t, Job{ID: "next", Image: img, Query: "dog"})
	if res := e.publishedResult(t, DefaultBatch, "crafted"); res.Status != StatusFailed || res.Error.Code != CodeInternal || res.Attempt != 1 {
		t.Errorf("crafted: %s %+v attempt %d; want failed internal on the first delivery", res.Status, res.Error, res.Attempt)
	}
	if e.dlqRecord(t, "crafted") == nil {
		t.Error("no DLQ record for the job that panicked")
	}
	if res := e.publishedResult(t, DefaultBatch, "next"); res.Status != StatusSucceeded {
		t.Errorf("the worker did not go on: next is %s", res.Status)
	}
}

func TestSameJobIDRunsOnce(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	j := Job{ID: "twice", Image: img, Query: "twice"}
	e.publishJob(t, j) // Nats-Msg-Id = id: JetStream drops the second within the window
	e.publishJob(t, j)
	e.publishedResult(t, DefaultBatch, "twice")
	testwait.Until(t, 30*time.Second, "the job to be acked", func() bool { return e.queueDrained(t) })

	// Past the dedupe window (here: another message id), the terminal state stops it.
	b, _ := json.Marshal(j)
	e.publish(t, b, "twice-again")
	testwait.Until(t, 30*time.Second, "the repeat to be acked", func() bool { return e.queueDrained(t) })
	if n := eng.Calls("twice"); n != 1 {
		t.Errorf("job ran %d times; want 1", n)
	}
	info, err := e.topo.Results.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("%d results published; want 1", info.State.Msgs)
	}
}

func TestCancelBeforeStartAndWhileRunning(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, _ := heldEngine(4) // never released: the running job ends only by its cancel
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	if err := e.topo.State.RequestCancel(t.Context(), "early", "test"); err != nil {
		t.Fatal(err)
	}
	e.publishJob(t, Job{ID: "early", Image: img, Query: "early"})
	if res := e.publishedResult(t, DefaultBatch, "early"); res.Status != StatusCanceled || res.Error.Code != CodeCanceled {
		t.Errorf("early: status %s error %+v; want canceled", res.Status, res.Error)
	}
	if eng.Calls("early") != 0 {
		t.Error("a job cancelled before it started ran on the engine")
	}

	e.publishJob(t, Job{ID: "running", Image: img, Query: "block"})
	if q := <-started; q != "block" {
		t.Fatalf("started %q", q)
	}
	if err := e.topo.State.RequestCancel(t.Context(), "running", "test"); err != nil {
		t.Fatal(err)
	}
	if res := e.publishedResult(t, DefaultBatch, "running"); res.Status != StatusCanceled {
		t.Errorf("running: status %s error %+v; want canceled", res.Status, res.Error)
	}
	testwait.Until(t, 30*time.Second, "the cancelled jobs to be acked", func() bool { return e.queueDrained(t) })
	if e.dlqRecord(t, "running") != nil || e.dlqRecord(t, "early") != nil {
		t.Error("a cancelled job was dead-lettered")
	}
}

func TestExpiredDeadlineIsNotRun(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	past := time.Now().Add(-time.Minute)
	future := time.Now().Add(time.Hour)
	e.publishJob(t, Job{ID: "late", Image: img, Query: "late", Deadline: &past})
	e.publishJob(t, Job{ID: "in-time", Image: img, Query: "in-time", Deadline: &future})
	if res := e.publishedResult(t, DefaultBatch, "late"); res.Status != StatusExpired || res.Error.Code != CodeDeadline {
		t.Errorf("late: status %s error %+v; want expired", res.Status, res.Error)
	}
	if res := e.publishedResult(t, DefaultBatch, "in-time"); res.Status != StatusSucceeded {
		t.Errorf("in-time: status %s error %+v", res.Status, res.Error)
	}
	if eng.Calls("late") != 0 {
		t.Error("an expired job ran")
	}
}

func TestDeadlinePassingInTheQueueExpiresTheJob(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, release := heldEngine(2)
	var ahead atomic.Int64 // how far the runner's clock is ahead of the wall clock
	cfg := e.runnerConfig("w1")
	cfg.Prefetch = 1
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	startRunner(t, e.topo, e.store, eng, cfg)

	e.publishJob(t, Job{ID: "ahead", Image: img, Query: "block"})
	<-started
	deadline := cfg.Now().Add(time.Minute)
	e.publishJob(t, Job{ID: "behind", Image: img, Query: "behind", Deadline: &deadline})
	ahead.Store(int64(2 * time.Minute)) // the deadline passes while "ahead" runs
	close(release)
	if res := e.publishedResult(t, DefaultBatch, "behind"); res.Status != StatusExpired {
		t.Errorf("status %s error %+v; want expired", res.Status, res.Error)
	}
	if eng.Calls("behind") != 0 {
		t.Error("the expired job ran")
	}
}

func TestHeartbeatsKeepLongAndWaitingJobsFromRedelivery(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 2 * time.Second, MaxDeliver: 5})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, release := heldEngine(4)
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1")) // prefetch 2

	e.publishJob(t, Job{ID: "long", Image: img, Query: "block"})
	<-started
	e.publishJob(t, Job{ID: "waiting", Image: img, Query: "waiting"}) // held, queued for the chip
	testwait.Until(t, 30*time.Second, "both jobs to be held", func() bool {
		info, err := e.topo.Consumer.Info(t.Context())
		return err == nil && info.NumAckPending == 2
	})
	// A second worker pulling meanwhile would receive any job whose ack wait ran out.
	other := enginetest.New()
	startRunner(t, e.topo, e.store, other, e.runnerConfig("w2"))
	time.Sleep(5 * time.Second) // 2.5 ack waits: no event to poll for, the point is that none comes
	close(release)

	for _, id := range []string{"long", "waiting"} {
		if res := e.publishedResult(t, DefaultBatch, id); res.Status != StatusSucceeded || res.Attempt != 1 {
			t.Errorf("%s: %s on attempt %d; want succeeded on the first", id, res.Status, res.Attempt)
		}
	}
	info, err := e.topo.Consumer.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || eng.Calls("block") != 1 || len(other.Seen()) != 0 {
		t.Errorf("%d redelivered, long job ran %d times, %d jobs went to the other worker; want 0, 1, 0",
			info.NumRedelivered, eng.Calls("block"), len(other.Seen()))
	}
}

func TestKilledRunnerJobComesBackAndCompletes(t *testing.T) {
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))

	// Runner A works over a connection of its own, which dies mid-job like its process.
	nsA := e.nats
	_, topoA := connectTopology(t, nsA, testTopology())
	engA, startedA, _ := heldEngine(1) // never released: A is killed mid-job
	cfgA := e.runnerConfig("A")
	cfgA.Grace = 100 * time.Millisecond
	a := startRunner(t, topoA, e.store, engA, cfgA)

	e.publishJob(t, Job{ID: "survivor", Image: img, Query: "block"})
	<-startedA
	topoA.JS.Conn().Close() // the "kill": no heartbeat, no ack, no nak reaches the server
	a.stop(t)               // its blocked job is cut off; nothing it does reaches NATS

	engB := enginetest.New() // no gate: B runs the "block" job straight through
	startRunner(t, e.topo, e.store, engB, e.runnerConfig("B"))
	res := e.publishedResult(t, DefaultBatch, "survivor")
	if res.Status != StatusSucceeded || res.Worker != "B" || res.Attempt != 2 {
		t.Errorf("status %s worker %s attempt %d; want succeeded by B on attempt 2", res.Status, res.Worker, res.Attempt)
	}
	if e.storedResult(t, defaultOutput, "survivor").Worker != "B" {
		t.Error("stored result is not B's")
	}
}

func TestS3OutageLosesNothing(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 100})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	started := make(chan string, 100)
	eng := enginetest.New()
	eng.Started, eng.Delay = started, 20*time.Millisecond // a job takes a while on the device
	cfg := e.runnerConfig("w1")
	cfg.OpTimeout = 2 * time.Second // cut minio-go's own retries short, so the Runner sees the outage
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	startRunner(t, e.topo, e.store, eng, cfg)

	const n = 20
	for i := range n {
		e.publishJob(t, Job{ID: fmt.Sprintf("s3-%02d", i), Image: img, Query: fmt.Sprintf("q%02d", i)})
	}
	<-started
	e.s3.Stop()
	testwait.Until(t, 60*time.Second, "a job to meet the outage", func() bool {
		return counterValue(t, cfg.Metrics.Retries) > 0
	})
	e.s3.Restart()

	for i := range n {
		id := fmt.Sprintf("s3-%02d", i)
		if res := e.publishedResult(t, DefaultBatch, id); res.Status != StatusSucceeded {
			t.Errorf("%s: status %s error %+v", id, res.Status, res.Error)
		}
		if e.storedResult(t, defaultOutput, id).Status != StatusSucceeded {
			t.Errorf("%s: stored result not succeeded", id)
		}
	}
	info, err := e.topo.DLQ.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d jobs dead-lettered during a storage outage; want 0", info.State.Msgs)
	}
}

func TestThousandJobsTwoRunnersOneResultEach(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 jobs through real servers")
	}
	e := newTestEnv(t, testTopology())
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	engs := []*enginetest.Engine{enginetest.New(), enginetest.New()}
	_, topoB := connectTopology(t, e.nats, testTopology())
	startRunner(t, e.topo, e.store, engs[0], e.runnerConfig("A"))
	startRunner(t, topoB, e.store, engs[1], e.runnerConfig("B"))

	const n = 1000
	for i := range n {
		b, _ := json.Marshal(Job{ID: fmt.Sprintf("k-%04d", i), Image: img, Query: fmt.Sprintf("k-%04d", i)})
		if _, err := e.js.PublishAsync(JobSubject(DefaultClass), b); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		t.Fatal("publishing 1,000 jobs did not complete")
	}
	testwait.Until(t, 5*time.Minute, "1,000 results", func() bool {
		info, err := e.topo.Results.Info(t.Context())
		return err == nil && info.State.Msgs >= n
	})
	stored := 0
	if err := e.store.List(t.Context(), defaultOutput, func(o storage.Object) bool { stored++; return true }); err != nil {
		t.Fatal(err)
	}
	if stored != n {
		t.Errorf("%d stored results; want %d", stored, n)
	}
	for i := range n {
		q := fmt.Sprintf("k-%04d", i)
		if c := engs[0].Calls(q) + engs[1].Calls(q); c != 1 {
			t.Errorf("job %s ran %d times", q, c)
		}
	}
	if a, b := len(engs[0].Seen()), len(engs[1].Seen()); a == 0 || b == 0 {
		t.Errorf("work split %d/%d; want both runners working", a, b)
	}
	testwait.Until(t, 30*time.Second, "every job acked", func() bool { return e.queueDrained(t) })
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
