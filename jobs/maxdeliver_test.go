package jobs

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

func TestMaxDeliveriesEndsInDLQWithFailedResult(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 3})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	eng.Err = errors.New("device busy") // not an InputError: worth retrying
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	w, err := NewMaxDeliveriesWatcher(natstest.Connect(t, e.nats), e.topo, e.store,
		DeadLetterConfig{Worker: "w1", DefaultOutput: defaultOutput, PollWait: 200 * time.Millisecond, OpTimeout: 10 * time.Second, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })

	e.publishJob(t, Job{ID: "never-works", Image: img, Query: "device-busy", Batch: "b2"})
	res := e.publishedResult(t, "b2", "never-works")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeMaxDeliveries {
		t.Fatalf("status %s error %+v; want failed with %s", res.Status, res.Error, CodeMaxDeliveries)
	}
	if !strings.Contains(res.Error.Message, "device busy") {
		t.Errorf("message %q does not say what kept failing", res.Error.Message)
	}
	if n := eng.Calls("device-busy"); n != 3 {
		t.Errorf("ran %d times; want MaxDeliver = 3", n)
	}
	rec := e.dlqRecord(t, "never-works")
	if rec == nil || rec.Code != CodeMaxDeliveries || rec.Attempts != 3 || rec.Job == nil {
		t.Fatalf("DLQ record %+v; want max_deliveries after 3 with the original job", rec)
	}
	if e.storedResult(t, defaultOutput, "never-works").Status != StatusFailed {
		t.Error("failed result not stored")
	}
	testwait.Until(t, 30*time.Second, "the job to leave LA_JOBS", func() bool {
		_, err := e.topo.Jobs.GetMsg(t.Context(), rec.StreamSeq)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
}

// startWatcher runs a max-deliveries watcher on a connection of its own until the test
// ends, retrying every 200 ms at first.
func startWatcher(t *testing.T, e *testEnv) {
	t.Helper()
	w, err := NewMaxDeliveriesWatcher(natstest.Connect(t, e.nats), e.topo, e.store,
		DeadLetterConfig{Worker: "w1", DefaultOutput: defaultOutput, PollWait: 200 * time.Millisecond, OpTimeout: time.Second, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	w.retryDelay, w.retryDelayMax = 200*time.Millisecond, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done, err := w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
}

// advisories counts the max-deliveries advisories the server sends from now on.
func advisories(t *testing.T, e *testEnv) func() int {
	t.Helper()
	var mu sync.Mutex
	n := 0
	nc := natstest.Connect(t, e.nats)
	if _, err := nc.Subscribe(MaxDeliveriesSubject, func(*nats.Msg) { mu.Lock(); n++; mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// Storage is down while a job uses up its deliveries and when its advisory comes: the
// watcher keeps the advisory and writes the result and record once storage is back.
func TestMaxDeliveriesRidesOutAStorageOutage(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 2})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))
	startWatcher(t, e)
	sent := advisories(t, e)

	e.s3.Stop()
	e.publishJob(t, Job{ID: "outage", Image: img, Query: "dog", Batch: "b3"})
	testwait.Until(t, 30*time.Second, "the max-deliveries advisory", func() bool { return sent() == 1 })
	time.Sleep(4 * time.Second) // the watcher tries (1 s each), and fails, a few times
	if _, err := e.topo.Results.GetLastMsgForSubject(t.Context(), ResultSubject("b3", "outage")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a result was published while storage was down (%v)", err)
	}
	e.s3.Restart()

	res := e.publishedResult(t, "b3", "outage")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeMaxDeliveries {
		t.Fatalf("status %s error %+v; want failed with %s", res.Status, res.Error, CodeMaxDeliveries)
	}
	if e.storedResult(t, defaultOutput, "outage").Error.Code != CodeMaxDeliveries {
		t.Error("the stored result is not the max_deliveries one")
	}
	rec := e.dlqRecord(t, "outage")
	if rec == nil || rec.Code != CodeMaxDeliveries {
		t.Fatalf("DLQ record %+v; want max_deliveries", rec)
	}
	testwait.Until(t, 30*time.Second, "the job to leave LA_JOBS", func() bool {
		_, err := e.topo.Jobs.GetMsg(t.Context(), rec.StreamSeq)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
}

// A job whose own output refuses for good (its bucket does not exist) ran out of
// deliveries: its result is stored under the worker's default output instead.
func TestMaxDeliveriesFallsBackToTheDefaultOutput(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 2})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	eng.Err = errors.New("device busy")
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))
	startWatcher(t, e)

	e.publishJob(t, Job{ID: "no-bucket", Image: img, Query: "dog", Output: "s3://no-such-bucket/out/"})
	res := e.publishedResult(t, DefaultBatch, "no-bucket")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeBadURL ||
		!strings.HasPrefix(res.Error.Message, "field output: ") || !strings.Contains(res.Error.Message, CodeMaxDeliveries) {
		t.Fatalf("status %s error %+v; want bad_url for the output, saying the job had run out of deliveries", res.Status, res.Error)
	}
	if res.ResultURL != ResultURL(defaultOutput, "no-bucket") {
		t.Errorf("result_url %q; want the default output's %s", res.ResultURL, ResultURL(defaultOutput, "no-bucket"))
	}
	if stored := e.storedResult(t, defaultOutput, "no-bucket"); stored.Error == nil || stored.Error.Code != CodeBadURL {
		t.Errorf("stored result %+v; want the bad_url result", stored.Error)
	}
	if rec := e.dlqRecord(t, "no-bucket"); rec == nil || rec.Code != CodeBadURL || rec.Job == nil {
		t.Errorf("DLQ record %+v; want bad_url with the job", rec)
	}
}

// NATS refuses the result for a while (here LA_RESULTS is gone, as a stream without quorum
// would be): the watcher keeps the advisory and publishes once the stream is back.
func TestMaxDeliveriesRetriesWhileResultsCannotBePublished(t *testing.T) {
	cfg := TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 2}
	e := newTestEnv(t, cfg)
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	eng.Err = errors.New("device busy")
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))
	startWatcher(t, e)
	sent := advisories(t, e)

	if err := e.js.DeleteStream(t.Context(), ResultsStream); err != nil {
		t.Fatal(err)
	}
	e.publishJob(t, Job{ID: "no-stream", Image: img, Query: "dog"})
	testwait.Until(t, 30*time.Second, "the max-deliveries advisory", func() bool { return sent() == 1 })
	time.Sleep(time.Second) // the watcher tries, and fails, a few times
	if _, err := EnsureTopology(t.Context(), e.js, completeTopology(cfg)); err != nil {
		t.Fatal(err)
	}
	if res := e.publishedResult(t, DefaultBatch, "no-stream"); res.Error == nil || res.Error.Code != CodeMaxDeliveries {
		t.Fatalf("result %+v; want max_deliveries", res.Error)
	}
	if rec := e.dlqRecord(t, "no-stream"); rec == nil || rec.Code != CodeMaxDeliveries {
		t.Errorf("DLQ record %+v; want max_deliveries", rec)
	}
}

// startWatcherNamed is startWatcher for a worker of the given name.
func startWatcherNamed(t *testing.T, e *testEnv, worker string) {
	t.Helper()
	w, err := NewMaxDeliveriesWatcher(natstest.Connect(t, e.nats), e.topo, e.store,
		DeadLetterConfig{Worker: worker, DefaultOutput: defaultOutput, PollWait: 200 * time.Millisecond, OpTimeout: 5 * time.Second, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	w.retryDelay, w.retryDelayMax = 200*time.Millisecond, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done, err := w.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
}

// subjectCounts is how many messages stream holds per subject.
func subjectCounts(t *testing.T, s jetstream.Stream) map[string]uint64 {
	t.Helper()
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// failingJobs publishes n jobs named prefix-<i> that fail for now on every delivery.
func failingJobs(t *testing.T, e *testEnv, img, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = prefix + "-" + strconv.Itoa(i)
		e.publishJob(t, Job{ID: ids[i], Image: img, Query: "device-busy"})
	}
	return ids
}

// checkDeadLetteredOnce waits until every job of ids has its max_deliveries result and
// DLQ record, then checks that each has exactly one of each, and that LA_JOBS and the
// advisory stream are empty.
func checkDeadLetteredOnce(t *testing.T, e *testEnv, ids []string) {
	t.Helper()
	testwait.Until(t, 60*time.Second, "every job to be dead-lettered", func() bool {
		return len(subjectCounts(t, e.topo.DLQ)) >= len(ids)
	})
	time.Sleep(time.Second) // a second record would come now
	results, records := subjectCounts(t, e.topo.Results), subjectCounts(t, e.topo.DLQ)
	for _, id := range ids {
		if n := records[DLQSubject(id)]; n != 1 {
			t.Errorf("%s: %d DLQ records; want 1", id, n)
		}
		if n := results[ResultSubject(DefaultBatch, id)]; n != 1 {
			t.Errorf("%s: %d results; want 1", id, n)
		}
	}
	if rec := e.dlqRecord(t, ids[0]); rec == nil || rec.Code != CodeMaxDeliveries {
		t.Errorf("DLQ record %+v; want max_deliveries", rec)
	}
	testwait.Until(t, 30*time.Second, "LA_JOBS and the advisory stream to be empty", func() bool {
		j, err := e.topo.Jobs.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		a, err := e.topo.Advisories.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return j.State.Msgs == 0 && a.State.Msgs == 0
	})
}

// A burst of advisories (many jobs using up their deliveries at once) with two workers'
// watchers: every job is dead-lettered exactly once, none is dropped.
func TestMaxDeliveriesBurstIsDeadLetteredExactlyOnce(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 1})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	eng.Err = errors.New("device busy")
	cfg := e.runnerConfig("w1")
	cfg.Prefetch = 16
	startRunner(t, e.topo, e.store, eng, cfg)
	startWatcherNamed(t, e, "w1")
	startWatcherNamed(t, e, "w2")

	checkDeadLetteredOnce(t, e, failingJobs(t, e, img, "burst", 150))
}

// Advisories sent while no watcher runs are kept: a watcher started later dead-letters
// every job.
func TestMaxDeliveriesAdvisoriesWaitForAWatcher(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{AckWait: 3 * time.Second, MaxDeliver: 2})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng := enginetest.New()
	eng.Err = errors.New("device busy")
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))
	sent := advisories(t, e)

	ids := failingJobs(t, e, img, "unheard", 5)
	testwait.Until(t, 30*time.Second, "the advisories", func() bool { return sent() == len(ids) })
	time.Sleep(time.Second)
	if n := len(subjectCounts(t, e.topo.DLQ)); n != 0 {
		t.Fatalf("%d jobs dead-lettered with no watcher running", n)
	}
	if info, err := e.topo.Advisories.Info(t.Context()); err != nil || info.State.Msgs != uint64(len(ids)) {
		t.Fatalf("advisory stream holds %v (%v); want %d", info.State.Msgs, err, len(ids))
	}
	startWatcherNamed(t, e, "late")
	checkDeadLetteredOnce(t, e, ids)
}
