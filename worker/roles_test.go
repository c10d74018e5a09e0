package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed"
)

// TestProducerRoleOnTheEmbeddedServer: with credentials, the embedded server gives
// producers (LA_NATS_USER) the producer role and nothing more. A producer cannot delete
// or purge the streams or the workers' consumer, write a job's state (the kvsquat attack:
// a forged "succeeded" entry written first made the job acked with no result), publish
// results or dead letters, or read the dead-letter queue and the worker's inbox; it can
// publish jobs, read their results and state, and cancel. An operator can do the rest.
func TestProducerRoleOnTheEmbeddedServer(t *testing.T) {
	dataDir := t.TempDir()
	port := networkWorkerEnv(t, dataDir, map[string]string{
		"LA_NATS_USER": "producer", "LA_NATS_PASSWORD": "pw-Producer-1",
		"LA_NATS_OPERATOR_USER": "ops", "LA_NATS_OPERATOR_PASSWORD": "pw-Operator-1",
	})
	cfg, err := loadWorker(t)
	if err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, cfg, enginetest.New())
	t.Setenv("LA_NATS_URL", "nats://127.0.0.1:"+port)
	producerCfg := loadSubmitNATS(t, map[string]string{"LA_NATS_USER": "producer", "LA_NATS_PASSWORD": "pw-Producer-1"})
	producer := authPublisher(t, producerCfg, w)
	operator := authPublisher(t, loadSubmitNATS(t, map[string]string{"LA_NATS_USER": "ops", "LA_NATS_PASSWORD": "pw-Operator-1"}), w)

	// refused runs op, which the server must refuse on subject: a refused request is never
	// answered, so it ends by its (short) deadline, and the connection's last error says
	// which subject was refused.
	refused := func(subject string, op func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := op(ctx); err == nil {
			t.Errorf("producer: %s: allowed", subject)
		}
		testwait.Until(t, 5*time.Second, "the refusal of "+subject, func() bool {
			last := producer.Conn().LastError()
			return errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+subject) // the subject, or its start
		})
	}
	refused("$JS.API.STREAM.DELETE.LA_JOBS", func(ctx context.Context) error { return producer.DeleteStream(ctx, jobs.JobsStream) })
	refused("$JS.API.STREAM.DELETE.LA_DLQ", func(ctx context.Context) error { return producer.DeleteStream(ctx, jobs.DLQStream) })
	refused("$JS.API.CONSUMER.DELETE.LA_JOBS.la-workers", func(ctx context.Context) error {
		return producer.DeleteConsumer(ctx, jobs.JobsStream, jobs.ConsumerName)
	})
	refused("$JS.API.STREAM.PURGE.LA_RESULTS", func(ctx context.Context) error {
		s, err := producer.Stream(ctx, jobs.ResultsStream)
		if err != nil {
			return err
		}
		return s.Purge(ctx)
	})
	kv, err := producer.KeyValue(t.Context(), jobs.StateBucket)
	if err != nil {
		t.Fatalf("producer: open the state bucket to read it: %v", err)
	}
	refused("$KV.LA_JOB_STATE.kvsquat-1", func(ctx context.Context) error {
		_, err := kv.Put(ctx, "kvsquat-1", []byte(`{"status":"succeeded"}`))
		return err
	})
	refused("la.results.b.forged-1", func(ctx context.Context) error {
		_, err := producer.Publish(ctx, jobs.ResultSubjectPrefix+"b.forged-1",
			[]byte(`{"id":"forged-1","status":"succeeded","result_url":"file:///etc/shadow"}`))
		return err
	})
	refused("la.dlq.forged-1", func(ctx context.Context) error {
		_, err := producer.Publish(ctx, jobs.DLQSubjectPrefix+"forged-1", []byte(`{"id":"forged-1"}`))
		return err
	})
	refused("$JS.API.CONSUMER.CREATE.LA_DLQ", func(ctx context.Context) error { // (and every name after it)
		_, err := producer.OrderedConsumer(ctx, jobs.DLQStream, jetstream.OrderedConsumerConfig{})
		return err
	})
	dlqCounts, err := producer.Stream(t.Context(), jobs.DLQStream) // its counts may be read, not its messages
	if err != nil {
		t.Fatalf("producer: LA_DLQ's info: %v", err)
	}
	refused("$JS.API.STREAM.MSG.GET.LA_DLQ", func(ctx context.Context) error {
		_, err := dlqCounts.GetMsg(ctx, 1)
		return err
	})
	for _, subject := range []string{natsembed.WorkerInboxPrefix + ".>", "la.jobs.>", "la.>", "$JS.API.>"} {
		refused(subject, func(ctx context.Context) error {
			sub, err := producer.Conn().SubscribeSync(subject)
			if err != nil {
				return err
			}
			defer sub.Unsubscribe()
			return errors.New("a refused subscription is only reported asynchronously")
		})
	}

	// What a producer does: publish a job (kvsquat-1 runs and gets its result although a
	// forged state was tried first), read its state and result, cancel.
	publishJob(t, producer, "kvsquat-1", "dog")
	testwait.Until(t, time.Minute, "kvsquat-1's result", func() bool {
		r, ok := readResult(t, dataDir, "kvsquat-1")
		return ok && r.Status == jobs.StatusSucceeded
	})
	res, err := producer.Stream(t.Context(), jobs.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	// The result file is stored before the result is published and the state written:
	// the producer reads both once they are there.
	testwait.Until(t, 30*time.Second, "the producer reading kvsquat-1's published result", func() bool {
		_, err := res.GetLastMsgForSubject(t.Context(), jobs.ResultSubjectPrefix+"*.kvsquat-1")
		return err == nil
	})
	state := jobs.NewStateStore(kv)
	testwait.Until(t, 30*time.Second, "the producer reading kvsquat-1's state succeeded", func() bool {
		st, ok, err := state.Get(t.Context(), "kvsquat-1")
		return err == nil && ok && st.Status == jobs.StatusSucceeded
	})
	if err := state.RequestCancel(t.Context(), "queued-1", "test"); err != nil {
		t.Errorf("producer: request a cancel: %v", err)
	}
	if ok, err := state.CancelRequested(t.Context(), "queued-1"); err != nil || !ok {
		t.Errorf("producer: read the cancel request back: %v %v", ok, err)
	}
	// Nothing forged reached the streams.
	if _, err := res.GetLastMsgForSubject(t.Context(), jobs.ResultSubjectPrefix+"*.forged-1"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a forged result is on LA_RESULTS: %v", err)
	}

	// The operator may administer: purge the dead letters, read them.
	dlq, err := operator.Stream(t.Context(), jobs.DLQStream)
	if err != nil {
		t.Fatalf("operator: %v", err)
	}
	if err := dlq.Purge(t.Context()); err != nil {
		t.Errorf("operator: purge LA_DLQ: %v", err)
	}
	if _, err := operator.OrderedConsumer(t.Context(), jobs.DLQStream, jetstream.OrderedConsumerConfig{}); err != nil {
		t.Errorf("operator: read LA_DLQ: %v", err)
	}
}
