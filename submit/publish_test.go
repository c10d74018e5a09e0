package submit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// A full stream makes publishers back off and try again; no job is dropped, and each is
// stored once.
func TestPublisherBacksOffOnAFullStreamAndDropsNothing(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	must(t, err)
	ctx := t.Context()
	const capacity, total, inFlight = 5, 40, 4
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: jobs.JobsStream, Subjects: []string{jobs.JobSubjectPrefix + ">"},
		Retention: jetstream.WorkQueuePolicy, MaxMsgs: capacity, Discard: jetstream.DiscardNew,
		Duplicates: time.Minute,
	})
	must(t, err)
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "drain", AckPolicy: jetstream.AckExplicitPolicy})
	must(t, err)

	var retries atomic.Int64
	pub := &publisher{js: js, class: jobs.DefaultClass, backoff: Backoff{First: time.Millisecond, Max: 20 * time.Millisecond},
		warn: func(string, int, time.Duration, error) { retries.Add(1) }}

	work := make(chan *jobs.Job)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for range inFlight {
		wg.Go(func() {
			for j := range work {
				if _, err := pub.publish(ctx, j); err != nil {
					errs <- err
				}
			}
		})
	}
	go func() {
		for i := range total {
			work <- &jobs.Job{ID: JobID("sha256:"+strconv.Itoa(i), JobParams{Query: "q"}), Image: "s3://b/k", Query: "q"}
		}
		close(work)
	}()

	// The stream fills up at once; drain it only once publishers have had to back off.
	testwait.Until(t, 30*time.Second, "a publish to be refused by the full stream", func() bool { return retries.Load() > 0 })
	seen := map[string]int{}
	for len(seen) < total {
		msgs, err := cons.Fetch(capacity, jetstream.FetchMaxWait(5*time.Second))
		must(t, err)
		n := 0
		for m := range msgs.Messages() {
			seen[m.Headers().Get("Nats-Msg-Id")]++
			must(t, m.Ack())
			n++
		}
		if n == 0 {
			t.Fatalf("no message within 5 s with %d of %d received", len(seen), total)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("publish: %v", err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s stored %d times", id, n)
		}
	}
	info, err := stream.Info(ctx)
	must(t, err)
	if info.State.LastSeq != total {
		t.Errorf("stream stored %d messages, want %d", info.State.LastSeq, total)
	}
}

// A permanent error (no such stream for the expected name) is returned, not retried forever.
func TestPublisherGivesUpOnPermanentErrors(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	must(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "OTHER", Subjects: []string{jobs.JobSubjectPrefix + ">"}})
	must(t, err)
	pub := &publisher{js: js, class: jobs.DefaultClass, backoff: DefaultBackoff}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = pub.publish(ctx, &jobs.Job{ID: "a", Image: "s3://b/k", Query: "q"})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("err = %v (ctx %v), want a prompt permanent error", err, ctx.Err())
	}
}

func TestBackoffGrowsToItsCap(t *testing.T) {
	b := Backoff{First: 100 * time.Millisecond, Max: 350 * time.Millisecond}
	var got []time.Duration
	d := time.Duration(0)
	for range 4 {
		d = b.next(d)
		got = append(got, d)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond, 350 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff sequence %v, want %v", got, want)
		}
	}
}
