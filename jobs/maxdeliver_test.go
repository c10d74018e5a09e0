package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
		DeadLetterConfig{Worker: "w1", DefaultOutput: defaultOutput, OpTimeout: 10 * time.Second, Logger: e.log})
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
