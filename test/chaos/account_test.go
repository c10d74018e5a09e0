//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// This file is the one accounting every scenario and the soak end with. A scenario
// records each job it publishes in a ledger (the id its result is keyed by, where the
// result must be stored, the outcome it must reach); account waits until LA_JOBS has
// settled and then checks every recorded job against all four places a job leaves a
// trace: its state in LA_JOB_STATE, its result messages in LA_RESULTS, its stored result
// file, and its dead-letter records in LA_DLQ. The pass condition is the same everywhere:
//
//   - lost = 0: every published job has a terminal state, a published result, and (unless
//     its output location is refused on purpose) a stored result;
//   - every job terminal, nothing left in LA_JOBS, nothing pending or unacknowledged;
//   - each job reached the outcome the scenario expects (status, failure code);
//   - a failed job has a dead-letter record, any other has none;
//   - duplicates only as the wire contract allows them: at least once, so a job may run
//     twice, but a result message with the same Nats-Msg-Id (<id>-<job stream sequence>)
//     appears once within the duplicate window; repeats after the window, and results of
//     a job published again under a new message, are counted as duplicates and allowed.

// client is the test's own NATS connection: it publishes jobs and reads the streams.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// connect connects to urls and keeps reconnecting forever, so a client rides out a
// nats-server that dies with a worker or on its own.
func connect(t testing.TB, urls string) *client {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Timeout(2*time.Second), nats.Name("chaos test"))
	if err != nil {
		t.Fatalf("connect to %s: %v", urls, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &client{nc: nc, js: js}
}

// waitTopology waits until a worker has created the streams, the consumer and the bucket.
func (c *client) waitTopology(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := c.topologyErr()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's streams, consumer and bucket: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *client) topologyErr() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range []string{jobs.JobsStream, jobs.ResultsStream, jobs.DLQStream} {
		if _, err := c.js.Stream(ctx, s); err != nil {
			return fmt.Errorf("stream %s: %w", s, err)
		}
	}
	if _, err := c.js.Consumer(ctx, jobs.JobsStream, jobs.ConsumerName); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	_, err := c.js.KeyValue(ctx, jobs.StateBucket)
	return err
}

// publish publishes data with Nats-Msg-Id msgID (none when empty) until JetStream
// acknowledges it, retrying through outages for up to within: the message id makes a
// repeat of a publish that did reach the stream a duplicate the stream drops, and the ack
// then names the original.
func (c *client) publish(subject string, data []byte, msgID string, within time.Duration) (*jetstream.PubAck, error) {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var opts []jetstream.PublishOpt
		if msgID != "" {
			opts = append(opts, jetstream.WithMsgID(msgID))
		}
		ack, err := c.js.Publish(ctx, subject, data, opts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		if errors.Is(err, nats.ErrMaxPayload) || time.Now().After(deadline) {
			return nil, fmt.Errorf("publish %s (Nats-Msg-Id %q): %w", subject, msgID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// want is the outcome a scenario expects of one job.
type want struct {
	status jobs.Status // "" = any terminal status
	code   string      // the failure code; "" = none checked
	// unstored: the result cannot be stored (its output location is refused on purpose);
	// it must still be published and dead-lettered.
	unstored bool
}

var succeeded = want{status: jobs.StatusSucceeded}

// tracked is one published job.
type tracked struct {
	id     string // what its state, result and dead-letter record are keyed by
	msgID  string
	seq    uint64    // stream sequence of the job message
	at     time.Time // when JetStream acknowledged the publish
	output string    // result prefix (the worker's default when the job names none)
	want   want
}

// ledger is every job a scenario published.
type ledger struct {
	mu   sync.Mutex
	jobs []*tracked
}

func (l *ledger) add(tr *tracked) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs = append(l.jobs, tr)
}

func (l *ledger) all() []*tracked {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.jobs)
}

func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.jobs)
}

// submit publishes one job message and records it. id is what the worker keys the job
// by: the job's own id, or "" for a job whose id is unusable, which is keyed by its
// Nats-Msg-Id when that is a valid id and by seq=<stream sequence> otherwise (the wire
// contract's fallback).
func (l *ledger) submit(c *client, data []byte, msgID, id, output string, w want) error {
	ack, err := c.publish(jobs.JobSubject(jobs.DefaultClass), data, msgID, 2*time.Minute)
	if err != nil {
		return err
	}
	if id == "" {
		id = msgID
		if !jobs.ValidToken(msgID) {
			id = jobs.SeqKey(ack.Sequence)
		}
	}
	l.add(&tracked{id: id, msgID: msgID, seq: ack.Sequence, at: time.Now(), output: output, want: w})
	return nil
}

// submitJob publishes a well-formed job under its own id.
func (l *ledger) submitJob(c *client, j jobs.Job, defaultOutput string, w want) error {
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	out := j.Output
	if out == "" {
		out = defaultOutput
	}
	return l.submit(c, data, j.ID, j.ID, out, w)
}

// report is what account found; String is the line every scenario prints.
type report struct {
	Published    int
	Terminal     int
	ByStatus     map[jobs.Status]int
	Stored       int
	ResultMsgs   int
	Duplicates   int // result messages beyond the first of a job (at least once)
	DLQRecords   int
	LeftInStream uint64
	AckPending   int
	Pending      uint64
	Redelivered  int
	Lost         []string // "id: why"
	Violations   []string // anything else the pass condition forbids
	Latencies    []time.Duration
	WorkerTotals []time.Duration   // timing_ms.total of the first result of each job
	Outcomes     map[string]string // id -> "status code" of every terminal job
}

func (r *report) String() string {
	var st []string
	for _, s := range []jobs.Status{jobs.StatusSucceeded, jobs.StatusFailed, jobs.StatusCanceled, jobs.StatusExpired} {
		if r.ByStatus[s] > 0 {
			st = append(st, fmt.Sprintf("%s=%d", s, r.ByStatus[s]))
		}
	}
	return fmt.Sprintf("accounting: published=%d terminal=%d (%s) stored=%d results=%d duplicates=%d dlq=%d "+
		"left_in_stream=%d ack_pending=%d redelivered=%d lost=%d violations=%d p50=%s p95=%s",
		r.Published, r.Terminal, strings.Join(st, " "), r.Stored, r.ResultMsgs, r.Duplicates, r.DLQRecords,
		r.LeftInStream, r.AckPending, r.Redelivered, len(r.Lost), len(r.Violations),
		percentile(r.Latencies, 50), percentile(r.Latencies, 95))
}

// accountOpts say how to read stored results and how long the queue may take to settle.
type accountOpts struct {
	within    time.Duration                                         // settle bound, default 3 minutes
	read      func(ctx context.Context, url string) ([]byte, error) // a stored result; os.ErrNotExist when missing
	dupWindow time.Duration                                         // LA_DUPLICATE_WINDOW, default 2m
}

// account waits for the queue to settle and checks every job of the ledger; it fails the
// test when the pass condition does not hold and returns the figures either way.
func account(t testing.TB, c *client, l *ledger, o accountOpts) *report {
	t.Helper()
	if o.within == 0 {
		o.within = 3 * time.Minute
	}
	if o.dupWindow == 0 {
		o.dupWindow = 2 * time.Minute
	}
	r := &report{ByStatus: map[jobs.Status]int{}, Outcomes: map[string]string{}}
	if settleErr := waitSettled(c, o.within, r); settleErr != nil {
		r.Violations = append(r.Violations, settleErr.Error())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var states map[string]*jobs.State
	var results, dlq []streamMsg
	var err error
	// Right after a fault the cluster may still be electing a stream's leader ("no
	// responders"): the accounting's own reads wait for it rather than fail the run.
	if err = untilRead(ctx, func(ctx context.Context) error { states, err = readStates(ctx, c); return err }); err != nil {
		t.Fatalf("accounting: read %s: %v", jobs.StateBucket, err)
	}
	if err = untilRead(ctx, func(ctx context.Context) error { results, err = readStream(ctx, c, jobs.ResultsStream); return err }); err != nil {
		t.Fatalf("accounting: read %s: %v", jobs.ResultsStream, err)
	}
	if err = untilRead(ctx, func(ctx context.Context) error { dlq, err = readStream(ctx, c, jobs.DLQStream); return err }); err != nil {
		t.Fatalf("accounting: read %s: %v", jobs.DLQStream, err)
	}
	resultsByID := groupByID(results, jobs.ResultSubjectPrefix)
	dlqByID := groupByID(dlq, jobs.DLQSubjectPrefix)
	r.ResultMsgs, r.DLQRecords = len(results), len(dlq)

	for _, tr := range l.all() {
		r.Published++
		r.checkJob(ctx, tr, states[tr.id], resultsByID[tr.id], dlqByID[tr.id], o)
	}
	t.Log(r.String())
	for _, lost := range r.Lost[:min(len(r.Lost), 20)] {
		t.Errorf("lost: %s", lost)
	}
	for _, v := range r.Violations[:min(len(r.Violations), 20)] {
		t.Errorf("violation: %s", v)
	}
	if n := len(r.Lost) + len(r.Violations); n > 40 {
		t.Errorf("... %d lost and %d violations in all", len(r.Lost), len(r.Violations))
	}
	return r
}

// checkJob checks one job against its state, its result messages, its stored result and
// its dead-letter records.
func (r *report) checkJob(ctx context.Context, tr *tracked, st *jobs.State, results, dlq []streamMsg, o accountOpts) {
	var why []string
	if st == nil || !st.Status.Terminal() {
		why = append(why, fmt.Sprintf("state %v is not terminal", st))
	} else {
		r.Terminal++
		r.ByStatus[st.Status]++
		r.Outcomes[tr.id] = strings.TrimSpace(string(st.Status) + " " + st.Error)
	}
	var first *jobs.Result
	if len(results) == 0 {
		why = append(why, "no result on "+jobs.ResultsStream)
	} else {
		first = &jobs.Result{}
		if err := json.Unmarshal(results[0].data, first); err != nil {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: result message is not a result: %v", tr.id, err))
		}
		r.Latencies = append(r.Latencies, results[0].at.Sub(tr.at))
		r.WorkerTotals = append(r.WorkerTotals, time.Duration(first.TimingMS.Total*float64(time.Millisecond)))
		r.Duplicates += len(results) - 1
		r.checkDuplicates(tr.id, results, o.dupWindow)
	}
	if tr.want.unstored {
		if _, err := o.read(ctx, jobs.ResultURL(tr.output, tr.id)); err == nil {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: a result was stored at %s, a location it must not write", tr.id, tr.output))
		}
	} else {
		stored, err := readStored(ctx, o, tr)
		switch {
		case err != nil:
			why = append(why, err.Error())
		default:
			r.Stored++
			if st != nil && stored.Status != st.Status {
				r.Violations = append(r.Violations, fmt.Sprintf("%s: stored result says %s, the state %s", tr.id, stored.Status, st.Status))
			}
		}
	}
	if len(why) > 0 {
		r.Lost = append(r.Lost, tr.id+": "+strings.Join(why, "; "))
		return
	}
	if first.Attempt > 1 {
		r.Redelivered++
	}
	if tr.want.status != "" && st.Status != tr.want.status {
		r.Violations = append(r.Violations, fmt.Sprintf("%s: status %s (error %+v), want %s", tr.id, st.Status, first.Error, tr.want.status))
	}
	if tr.want.code != "" && st.Error != tr.want.code {
		r.Violations = append(r.Violations, fmt.Sprintf("%s: failure code %q (%+v), want %q", tr.id, st.Error, first.Error, tr.want.code))
	}
	switch {
	case st.Status == jobs.StatusFailed && len(dlq) == 0:
		r.Violations = append(r.Violations, fmt.Sprintf("%s: failed (%s) without a dead-letter record", tr.id, st.Error))
	case st.Status != jobs.StatusFailed && len(dlq) > 0:
		r.Violations = append(r.Violations, fmt.Sprintf("%s: %s but dead-lettered %d times", tr.id, st.Status, len(dlq)))
	}
	r.checkDuplicates(tr.id+" (dead letter)", dlq, o.dupWindow)
}

// checkDuplicates flags two messages of one job with the same Nats-Msg-Id within the
// duplicate window: the stream should have dropped the second.
func (r *report) checkDuplicates(id string, msgs []streamMsg, window time.Duration) {
	seen := map[string]time.Time{}
	for _, m := range msgs {
		if prev, ok := seen[m.msgID]; ok && m.at.Sub(prev) < window {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: message %q stored twice %s apart, inside the %s duplicate window",
				id, m.msgID, m.at.Sub(prev).Round(time.Millisecond), window))
		}
		seen[m.msgID] = m.at
	}
}

func readStored(ctx context.Context, o accountOpts, tr *tracked) (*jobs.Result, error) {
	url := jobs.ResultURL(tr.output, tr.id)
	b, err := o.read(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("no stored result at %s: %v", url, err)
	}
	var res jobs.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("stored result %s is not a result: %v", url, err)
	}
	if res.ID != tr.id || !res.Status.Terminal() {
		return nil, fmt.Errorf("stored result %s is of job %q with status %q", url, res.ID, res.Status)
	}
	return &res, nil
}

// waitSettled waits until LA_JOBS holds no message and its consumer has nothing pending or
// unacknowledged: every job message has been acked or terminated.
func waitSettled(c *client, within time.Duration, r *report) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		last = settled(c, r)
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the queue did not settle within %s: %v", within, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func settled(c *client, r *report) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, jobs.JobsStream)
	if err != nil {
		return err
	}
	cons, err := c.js.Consumer(ctx, jobs.JobsStream, jobs.ConsumerName)
	if err != nil {
		return err
	}
	ci := cons.CachedInfo()
	r.LeftInStream, r.AckPending, r.Pending = s.CachedInfo().State.Msgs, ci.NumAckPending, ci.NumPending
	if r.LeftInStream != 0 || r.AckPending != 0 || r.Pending != 0 {
		return fmt.Errorf("%s holds %d messages, %d unacknowledged, %d not yet delivered",
			jobs.JobsStream, r.LeftInStream, r.AckPending, r.Pending)
	}
	return nil
}

// streamMsg is one message read back from a stream.
type streamMsg struct {
	subject string
	msgID   string
	data    []byte
	at      time.Time // when the stream stored it
}

// readStream reads every message of a stream, in order.
func readStream(ctx context.Context, c *client, name string) ([]streamMsg, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	state := s.CachedInfo().State
	if state.Msgs == 0 {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []streamMsg
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, streamMsg{subject: m.Subject(), msgID: m.Headers().Get(nats.MsgIdHdr), data: m.Data(), at: meta.Timestamp})
			if meta.Sequence.Stream >= state.LastSeq {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// groupByID groups messages on <prefix>...<id> by the id, the subject's last token.
func groupByID(msgs []streamMsg, prefix string) map[string][]streamMsg {
	by := map[string][]streamMsg{}
	for _, m := range msgs {
		if !strings.HasPrefix(m.subject, prefix) {
			continue
		}
		id := m.subject[strings.LastIndexByte(m.subject, '.')+1:]
		by[id] = append(by[id], m)
	}
	return by
}

// readStates reads the latest state of every job from the state bucket.
func readStates(ctx context.Context, c *client) (map[string]*jobs.State, error) {
	kv, err := c.js.KeyValue(ctx, jobs.StateBucket)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	states := map[string]*jobs.State{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-w.Updates():
			if e == nil {
				return states, nil // the initial values are all in
			}
			if strings.HasPrefix(e.Key(), jobs.CancelKeyPrefix) || strings.HasPrefix(e.Key(), jobs.ClaimKeyPrefix) {
				continue // a cancel request or a claim, not a job's state
			}
			var st jobs.State
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				return nil, fmt.Errorf("state of %s: %w", e.Key(), err)
			}
			states[e.Key()] = &st
		}
	}
}

// percentile is the p-th percentile of ds (nearest rank), 0 when there are none.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s) + 99) / 100
	return s[max(0, min(len(s)-1, i-1))].Round(time.Millisecond)
}

// untilRead retries read while the cluster answers "no responders" (a stream between
// leaders) or an attempt stalls, until ctx ends; any other error ends it at once. Each
// attempt has its own deadline: a watcher or ordered consumer created while a restarted
// node still catches up can wait forever for messages that a fresh one gets at once (CI
// once saw the state bucket's watcher sit silent for the whole five minutes).
func untilRead(ctx context.Context, read func(context.Context) error) error {
	const attempt = 30 * time.Second
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := read(actx)
		stalled := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if err == nil || !stalled && !errors.Is(err, nats.ErrNoResponders) && !strings.Contains(err.Error(), "no responders") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}
