package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// trendLen is how many samples of each class's depth the overview's trend holds.
const trendLen = 60

// maxScan bounds the job messages read to count pending jobs per batch: LA_JOBS allows no
// second consumer, so they are read one by one; past it the counts are partial.
const maxScan = 200_000

// queueView is what the console knows of LA_JOBS: the depth per class (from the stream's
// subject counts), the jobs in flight (the shared consumer's unacknowledged ones) and the
// jobs per batch still in the stream (queued or running). It is asked of JetStream only
// when a page asks and the last answer is older than every: an idle console costs
// nothing, an open one a few requests a second at most.
type queueView struct {
	js     jetstream.JetStream
	every  time.Duration
	queued *queuedIndex // the scan of the job messages fills it too

	mu      sync.Mutex // one refresh at a time; guards the fields below
	at      time.Time
	classes map[string]int
	trend   map[string][]int
	flight  int
	batches map[string]int
	partial bool      // the batch counts stopped short: at maxScan, or out of time
	scanAt  time.Time // the next scan of the job messages; the counts per batch wait till then
	err     error
}

type classDepth struct {
	Class   string `json:"class"`
	Pending int    `json:"pending"`
	Trend   []int  `json:"trend"`
}

// snapshot is the view's latest counts, refreshed first when older than every.
type queueSnapshot struct {
	classes  []classDepth
	inFlight int
	batches  map[string]int
	partial  bool
}

func (q *queueView) snapshot(ctx context.Context) (queueSnapshot, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if time.Since(q.at) >= q.every {
		q.err = q.refresh(ctx)
		q.at = time.Now()
	}
	snap := queueSnapshot{inFlight: q.flight, batches: q.batches, partial: q.partial}
	for c, n := range q.classes {
		snap.classes = append(snap.classes, classDepth{Class: c, Pending: n, Trend: slices.Clone(q.trend[c])})
	}
	slices.SortFunc(snap.classes, func(a, b classDepth) int { return strings.Compare(a.Class, b.Class) })
	return snap, q.err
}

// refresh asks JetStream for the counts; on an error the last counts stay.
func (q *queueView) refresh(ctx context.Context) error {
	st, err := q.js.Stream(ctx, jobs.JobsStream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", jobs.JobsStream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(jobs.JobSubjectPrefix+">"))
	if err != nil {
		return fmt.Errorf("stream %s: %w", jobs.JobsStream, err)
	}
	classes := map[string]int{}
	for subj, n := range info.State.Subjects {
		classes[strings.TrimPrefix(subj, jobs.JobSubjectPrefix)] = int(n)
	}
	if q.trend == nil {
		q.trend = map[string][]int{}
	}
	for c := range q.trend {
		if _, ok := classes[c]; !ok {
			classes[c] = 0 // drained: its trend goes on at 0
		}
	}
	for c, n := range classes {
		t := append(q.trend[c], n)
		if len(t) > trendLen {
			t = t[len(t)-trendLen:]
		}
		q.trend[c] = t
	}
	q.classes = classes
	cons, err := q.js.Consumer(ctx, jobs.JobsStream, jobs.ConsumerName)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", jobs.ConsumerName, err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", jobs.ConsumerName, err)
	}
	q.flight = ci.NumAckPending
	if time.Now().Before(q.scanAt) {
		return nil
	}
	// The scan reads every job message: a long queue makes it slow, so it is repeated
	// less often then (ten times its own length apart at least), keeping its share of
	// the server's time small.
	began := time.Now()
	batches, ids, through, partial, err := pendingByBatch(ctx, st, info.State.FirstSeq, info.State.Msgs, q.queued.key)
	if err != nil {
		return err
	}
	q.batches, q.partial = batches, partial
	q.queued.scanned(ids, through)
	q.scanAt = time.Now().Add(max(q.every, 10*time.Since(began)))
	return nil
}

// pendingByBatch counts the job messages in LA_JOBS by batch, reading them by sequence
// from first; a message that is no job counts for no batch. It also maps the id of each
// message read (queuedIndex.key) to its sequence, through the last sequence it read.
func pendingByBatch(ctx context.Context, st jetstream.Stream, first, msgs uint64, key func(string) uint64) (
	batches map[string]int, ids map[uint64]uint64, through uint64, partial bool, err error) {
	out, ids := map[string]int{}, map[uint64]uint64{}
	if msgs == 0 {
		return out, ids, max(first, 1) - 1, false, nil // an empty stream's first is its last + 1
	}
	for seq, n := first, 0; ; n++ {
		if n >= maxScan {
			return out, ids, through, true, nil
		}
		msg, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(jobs.JobSubjectPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, ids, through, false, nil
		}
		if err != nil && ctx.Err() != nil {
			return out, ids, through, true, nil // out of time: what was counted, said to be partial
		}
		if err != nil {
			return out, ids, through, false, fmt.Errorf("read %s at sequence %d: %w", jobs.JobsStream, seq, err)
		}
		seq, through = msg.Sequence+1, msg.Sequence
		id, batch, isJSON := jobKey(msg.Data, msg.Header, msg.Sequence)
		ids[key(id)] = msg.Sequence
		if isJSON {
			out[batch]++
		}
	}
}

// queuedOf calls fn with every decodable job of batch still in LA_JOBS.
func queuedOf(ctx context.Context, js jetstream.JetStream, batch string, fn func(*jobs.Job) error) error {
	return jobs.QueuedJobs(ctx, js, func(j *jobs.Job, _ time.Time) error {
		if j.Batch != batch {
			return nil
		}
		return fn(j)
	})
}
