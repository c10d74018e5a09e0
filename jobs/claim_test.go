package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage"
)

// publishedAs publishes j's JSON with msgID as Nats-Msg-Id and returns its stream sequence.
func (e *testEnv) publishedAs(t *testing.T, data []byte, msgID string) uint64 {
	t.Helper()
	ack, err := e.js.Publish(t.Context(), JobSubject(DefaultClass), data, jetstream.WithMsgID(msgID))
	if err != nil {
		t.Fatalf("publish %s: %v", msgID, err)
	}
	if ack.Duplicate {
		t.Fatalf("publish %s: dropped as a duplicate", msgID)
	}
	return ack.Sequence
}

func jobJSON(t *testing.T, j Job) []byte {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resultCount is the number of results published on la.results.<batch>.<id>.
func (e *testEnv) resultCount(t *testing.T, batch, id string) int {
	t.Helper()
	info, err := e.topo.Results.Info(t.Context(), jetstream.WithSubjectFilter(ResultSubject(batch, id)))
	if err != nil {
		t.Fatalf("results stream info: %v", err)
	}
	return int(info.State.Subjects[ResultSubject(batch, id)])
}

// dlqRecords are every dead-letter record of id, oldest first.
func (e *testEnv) dlqRecords(t *testing.T, id string) []DLQRecord {
	t.Helper()
	info, err := e.topo.DLQ.Info(t.Context())
	if err != nil {
		t.Fatalf("DLQ info: %v", err)
	}
	var recs []DLQRecord
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := e.topo.DLQ.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("read DLQ message %d: %v", seq, err)
		}
		if m.Subject != DLQSubject(id) {
			continue
		}
		var rec DLQRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatalf("DLQ record %d is not JSON: %v", seq, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// checkLost checks that res is the duplicate_id failure of a message of batch that lost
// its id to ownerBatch: published on its own batch, naming the owner's, stored nowhere.
func checkLost(t *testing.T, res Result, batch, ownerBatch string) {
	t.Helper()
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeDuplicateID {
		t.Errorf("result of the loser %s/%s: status %s error %+v; want failed %s", batch, res.ID, res.Status, res.Error, CodeDuplicateID)
		return
	}
	if !strings.Contains(res.Error.Message, "belongs to batch "+ownerBatch+" ") {
		t.Errorf("duplicate_id message %q does not name the owning batch %s", res.Error.Message, ownerBatch)
	}
	if res.Batch != batch || res.ResultURL != "" {
		t.Errorf("loser result batch %q result_url %q; want its own batch %s and no stored result", res.Batch, res.ResultURL, batch)
	}
}

// Defect 1 of issue 23: two messages with one job id, different image, query, batch and
// metadata, published back to back under different Nats-Msg-Ids, race on two workers. One
// owns the id and runs; the other fails duplicate_id on its own batch's subject with a
// dead-letter record and leaves the owner's result, state and file alone.
func TestSameIDRaceHasOneOwner(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	imgA := e.putImage(t, "00.jpg", readTestdata(t, "dog.jpg"))
	imgB := e.putImage(t, "05.jpg", readTestdata(t, "dog.jpg"))
	eng1, eng2 := enginetest.New(), enginetest.New()
	eng1.Delay, eng2.Delay = 50*time.Millisecond, 50*time.Millisecond // the two of a pair overlap
	cfg := e.runnerConfig("w1")
	cfg.Prefetch = 4
	startRunner(t, e.topo, e.store, eng1, cfg)
	cfg.Worker = "w2"
	startRunner(t, e.topo, e.store, eng2, cfg)

	const pairs = 6
	type side struct {
		job Job
		seq uint64
	}
	sent := make([][2]side, pairs)
	for i := range pairs {
		id := fmt.Sprintf("dupd-%d", i)
		a := Job{ID: id, Image: imgA, Query: "red circle", Batch: "batch-a", Metadata: json.RawMessage(`{"side":"a"}`)}
		b := Job{ID: id, Image: imgB, Query: "blue square", Batch: "batch-b", Metadata: json.RawMessage(`{"side":"b"}`)}
		sent[i][0] = side{a, e.publishedAs(t, jobJSON(t, a), id)}
		sent[i][1] = side{b, e.publishedAs(t, jobJSON(t, b), id+"-x")}
	}
	testwait.Until(t, 60*time.Second, "every message acked or terminated", func() bool { return e.queueDrained(t) })
	for i, pair := range sent {
		id := pair[0].job.ID
		ra := e.publishedResult(t, "batch-a", id)
		rb := e.publishedResult(t, "batch-b", id)
		owner, loser := pair[0], pair[1]
		ownerRes, loserRes := ra, rb
		if rb.Status == StatusSucceeded {
			owner, loser, ownerRes, loserRes = loser, owner, rb, ra
		}
		if ownerRes.Status != StatusSucceeded {
			t.Errorf("pair %d: neither message succeeded: %s %+v, %s %+v", i, ra.Status, ra.Error, rb.Status, rb.Error)
			continue
		}
		checkLost(t, loserRes, loser.job.Batch, owner.job.Batch)

		stored := e.storedResult(t, defaultOutput, id)
		if stored.Status != StatusSucceeded || stored.Batch != owner.job.Batch || stored.Query != owner.job.Query ||
			stored.Image != owner.job.Image || string(stored.Metadata) != string(owner.job.Metadata) {
			t.Errorf("pair %d: stored result is batch %s query %q image %s metadata %s; want the owner's (%s, %q, %s, %s)",
				i, stored.Batch, stored.Query, stored.Image, stored.Metadata, owner.job.Batch, owner.job.Query, owner.job.Image, owner.job.Metadata)
		}
		recs := e.dlqRecords(t, id)
		if len(recs) != 1 || recs[0].Code != CodeDuplicateID || recs[0].Batch != loser.job.Batch || recs[0].StreamSeq != loser.seq {
			t.Errorf("pair %d: DLQ records %+v; want one duplicate_id record of the loser (batch %s, stream sequence %d)",
				i, recs, loser.job.Batch, loser.seq)
		}
		st, _, err := e.topo.State.Get(t.Context(), id)
		if err != nil || st.Status != StatusSucceeded {
			t.Errorf("pair %d: state %+v (%v); want the owner's succeeded", i, st, err)
		}
	}
	ran := 0
	for _, eng := range []*enginetest.Engine{eng1, eng2} {
		ran += eng.Calls("red circle") + eng.Calls("blue square")
	}
	if n := ran; n != pairs {
		t.Errorf("the engine ran %d jobs for %d ids; want one per id", n, pairs)
	}
}

// The same job published again under a new Nats-Msg-Id (past JetStream's duplicate window,
// say) is answered by the first message's result: acked without running, writing nothing.
func TestResubmittedJobIsAnsweredByTheFirst(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, release := heldEngine(2)
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	data := jobJSON(t, Job{ID: "same-1", Image: img, Query: "block", Batch: "b1"})
	e.publishedAs(t, data, "same-1")
	<-started // the first one runs: the second arrives while it does
	e.publishedAs(t, data, "same-1-again")
	testwait.Until(t, 30*time.Second, "the resubmission to be acknowledged", func() bool {
		info, err := e.topo.Consumer.Info(t.Context())
		if err != nil {
			t.Fatalf("consumer info: %v", err)
		}
		return info.NumPending == 0 && info.NumAckPending == 1
	})
	close(release)
	if res := e.publishedResult(t, "b1", "same-1"); res.Status != StatusSucceeded {
		t.Fatalf("status %s %+v; want succeeded", res.Status, res.Error)
	}
	testwait.Until(t, 30*time.Second, "both messages acked", func() bool { return e.queueDrained(t) })

	// Published again after the first has ended: acked too.
	e.publishedAs(t, data, "same-1-later")
	testwait.Until(t, 30*time.Second, "the later resubmission acked", func() bool { return e.queueDrained(t) })
	if n := eng.Calls("block"); n != 1 {
		t.Errorf("ran %d times; want once", n)
	}
	if n := e.resultCount(t, "b1", "same-1"); n != 1 {
		t.Errorf("%d results published; want the first message's only", n)
	}
	if recs := e.dlqRecords(t, "same-1"); len(recs) != 0 {
		t.Errorf("dead-letter records %+v; want none", recs)
	}
}

// Defect 8 of issue 23: the worker-made key of a message whose id cannot be read is one no
// producer id can be. A garbage message whose Nats-Msg-Id is seq-<n> (a valid job id) and
// one whose Nats-Msg-Id is seq=<n> (not one: ignored) do not take the key of the garbage
// message at stream sequence n: all three end failed, each under a key of its own.
func TestWorkerMadeKeysCannotCollideWithProducerIDs(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))

	info, err := e.topo.Jobs.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	next := info.State.LastSeq + 1
	squatter := e.publishedAs(t, []byte("not json"), fmt.Sprintf("seq-%d", next+2))
	e.dlqRecord(t, fmt.Sprintf("seq-%d", next+2)) // it ended before the real one arrives
	lookalike := e.publishedAs(t, []byte("not json either"), fmt.Sprintf("seq=%d", next+2))
	ack, err := e.js.Publish(t.Context(), JobSubject(DefaultClass), []byte("\x00 garbage")) // no Nats-Msg-Id
	if err != nil {
		t.Fatal(err)
	}
	if squatter != next || lookalike != next+1 || ack.Sequence != next+2 {
		t.Fatalf("stream sequences %d, %d, %d; want %d, %d, %d", squatter, lookalike, ack.Sequence, next, next+1, next+2)
	}
	for _, c := range []struct {
		key  string
		seq  uint64
		body string
	}{
		{fmt.Sprintf("seq-%d", next+2), squatter, "not json"}, // a producer may name any valid id
		{SeqKey(lookalike), lookalike, "not json either"},
		{SeqKey(ack.Sequence), ack.Sequence, "\x00 garbage"},
	} {
		res := e.publishedResult(t, DefaultBatch, c.key)
		if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeInvalidJob || res.ID != c.key {
			t.Errorf("%s: id %s status %s error %+v; want failed %s", c.key, res.ID, res.Status, res.Error, CodeInvalidJob)
		}
		if res.ResultURL != ResultURL(defaultOutput, c.key) {
			t.Errorf("%s: stored at %q; want %s", c.key, res.ResultURL, ResultURL(defaultOutput, c.key))
		}
		if stored := e.storedResult(t, defaultOutput, c.key); stored.ID != c.key {
			t.Errorf("%s: the stored result is %s's", c.key, stored.ID)
		}
		e.dlqRecord(t, c.key) // waits for the job to end
		recs := e.dlqRecords(t, c.key)
		if len(recs) != 1 || recs[0].StreamSeq != c.seq || string(recs[0].JobBase64) != c.body {
			t.Errorf("%s: DLQ records %+v; want one, of the message at %d", c.key, recs, c.seq)
		}
		if n := e.resultCount(t, DefaultBatch, c.key); n != 1 {
			t.Errorf("%s: %d results; want one", c.key, n)
		}
	}
	if !ValidResultID(SeqKey(1)) || ValidToken(SeqKey(1)) {
		t.Errorf("SeqKey(1) = %s: want a valid result id that is no job id", SeqKey(1))
	}
}

// A message that cannot be decoded but names a job id, in its body or as its Nats-Msg-Id,
// while another message owns that id, fails duplicate_id and writes nothing of the
// owner's: not while the owner runs, not after it ended.
func TestUndecodableMessageCannotOverwriteTheOwner(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	img := e.putImage(t, "dog.jpg", readTestdata(t, "dog.jpg"))
	eng, started, release := heldEngine(1)
	startRunner(t, e.topo, e.store, eng, e.runnerConfig("w1"))

	e.publishedAs(t, jobJSON(t, Job{ID: "victim-1", Image: img, Query: "block", Batch: "owners"}), "victim-1-own")
	<-started
	e.publishedAs(t, []byte(`{"id":"victim-1","image":"`+img+`","query":""}`), "victim-1-bad")
	e.publishedAs(t, []byte("not json at all"), "victim-1")
	testwait.Until(t, 30*time.Second, "both bad messages to end", func() bool {
		return e.resultCount(t, DefaultBatch, "victim-1") == 2
	})
	if _, err := e.store.Get(t.Context(), ResultURL(defaultOutput, "victim-1"), 0); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a result file of victim-1 exists while its owner still runs (%v)", err)
	}
	if st, ok, _ := e.topo.State.Get(t.Context(), "victim-1"); !ok || st.Status != StatusRunning {
		t.Errorf("state of victim-1 while its owner runs: %+v; want running", st)
	}
	close(release)
	if res := e.publishedResult(t, "owners", "victim-1"); res.Status != StatusSucceeded {
		t.Fatalf("owner: status %s %+v; want succeeded", res.Status, res.Error)
	}
	// After the owner ended too.
	e.publishedAs(t, []byte(`{"id":"victim-1","image":"`+img+`","query":"x","max_new_tokens":-1}`), "victim-1-late")
	testwait.Until(t, 30*time.Second, "every message to end", func() bool { return e.queueDrained(t) })
	// A drained consumer can be seen a moment before the last message's dead-letter record
	// is readable, so wait for the third record (a lost one times out and fails below).
	var recs []DLQRecord
	testwait.Until(t, 30*time.Second, "a dead-letter record for each bad message", func() bool {
		recs = e.dlqRecords(t, "victim-1")
		return len(recs) >= 3
	})
	if len(recs) != 3 {
		t.Errorf("%d dead-letter records; want one per bad message naming victim-1 (3)", len(recs))
	}
	for _, rec := range recs {
		if rec.Code != CodeDuplicateID || rec.Batch != DefaultBatch {
			t.Errorf("DLQ record %+v; want %s in batch %s", rec, CodeDuplicateID, DefaultBatch)
		}
	}
	if n := e.resultCount(t, DefaultBatch, "victim-1"); n != 3 {
		t.Errorf("%d duplicate_id results on the default batch; want 3", n)
	}
	m, err := e.topo.Results.GetLastMsgForSubject(t.Context(), ResultSubject(DefaultBatch, "victim-1"))
	if err != nil {
		t.Fatal(err)
	}
	var last Result
	if err := json.Unmarshal(m.Data, &last); err != nil {
		t.Fatal(err)
	}
	checkLost(t, last, DefaultBatch, "owners")
	stored := e.storedResult(t, defaultOutput, "victim-1")
	if stored.Status != StatusSucceeded || stored.Batch != "owners" || stored.Query != "block" {
		t.Errorf("stored result: status %s batch %s query %q; want the owner's", stored.Status, stored.Batch, stored.Query)
	}
	if st, _, _ := e.topo.State.Get(t.Context(), "victim-1"); st.Status != StatusSucceeded {
		t.Errorf("state %+v; want the owner's succeeded", st)
	}
}

// The max-deliveries watcher respects the claim: a message that ran out of deliveries
// while another one owns its id fails duplicate_id, is removed from LA_JOBS, and writes
// no result file or state of that id.
func TestMaxDeliveriesWatcherRespectsTheClaim(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	w, err := NewMaxDeliveriesWatcher(natstest.Connect(t, e.nats), e.topo, e.store,
		DeadLetterConfig{Worker: "w1", DefaultOutput: defaultOutput, OpTimeout: 10 * time.Second, PollWait: time.Second, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	owned, _, err := e.topo.State.claim(t.Context(), "held-1", Claim{StreamSeq: 999, Batch: "first", Digest: "other"})
	if err != nil || owned != claimOwned {
		t.Fatalf("claim: %v %v", owned, err)
	}
	seq := e.publishedAs(t, jobJSON(t, Job{ID: "held-1", Image: "s3://images/x.jpg", Query: "q", Batch: "second"}), "held-1")
	adv, err := json.Marshal(maxDeliveriesAdvisory{Stream: JobsStream, Consumer: ConsumerName, StreamSeq: seq, Deliveries: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.handle(t.Context(), adv); err != nil {
		t.Fatalf("handle: %v", err)
	}
	checkLost(t, e.publishedResult(t, "second", "held-1"), "second", "first")
	if recs := e.dlqRecords(t, "held-1"); len(recs) != 1 || recs[0].Code != CodeDuplicateID || recs[0].StreamSeq != seq {
		t.Errorf("DLQ records %+v; want one duplicate_id record at %d", recs, seq)
	}
	if _, ok, _ := e.topo.State.Get(t.Context(), "held-1"); ok {
		t.Error("the watcher wrote the state of an id it does not own")
	}
	if _, err := e.store.Get(t.Context(), ResultURL(defaultOutput, "held-1"), 0); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the watcher stored a result of an id it does not own (%v)", err)
	}
	if _, err := e.topo.Jobs.GetMsg(t.Context(), seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the message is still in %s (%v)", JobsStream, err)
	}
}

// A losing message too large for its dead-letter record to carry it is stored under a
// worker-made name, <id>=lost-<seq>.job.json, never at the owner's <id>.job.json.
func TestLostMessageTooLargeForItsRecordIsStoredUnderItsOwnName(t *testing.T) {
	e := newTestEnv(t, TopologyConfig{})
	startRunner(t, e.topo, e.store, enginetest.New(), e.runnerConfig("w1"))
	if _, _, err := e.topo.State.claim(t.Context(), "big-loser", Claim{StreamSeq: 1 << 40, Batch: "first", Digest: "other"}); err != nil {
		t.Fatal(err)
	}
	j := Job{ID: "big-loser", Image: "s3://images/x.jpg", Query: "dog", Batch: "second", Metadata: json.RawMessage(`{}`)}
	data, _ := json.Marshal(j)
	j.Metadata = bigMetadata(t, int(e.js.Conn().MaxPayload())-len(data)-200) // the job just fits
	data = encodeRaw(t, j)
	seq := e.publishedAs(t, data, j.ID)

	checkLost(t, e.publishedResult(t, "second", j.ID), "second", "first")
	testwait.Until(t, 30*time.Second, "the message to end", func() bool { return e.queueDrained(t) })
	recs := e.dlqRecords(t, j.ID)
	want := JobURL(defaultOutput, j.ID+"=lost-"+fmt.Sprint(seq))
	if len(recs) != 1 || recs[0].JobURL != want || recs[0].Job != nil || recs[0].Code != CodeDuplicateID {
		t.Fatalf("DLQ records %+v; want one duplicate_id record naming %s", recs, want)
	}
	if stored, err := e.store.Get(t.Context(), want, 0); err != nil || string(stored) != string(data) {
		t.Errorf("stored job: %d bytes (%v); want the %d bytes published", len(stored), err, len(data))
	}
	if _, err := e.store.Get(t.Context(), JobURL(defaultOutput, j.ID), 0); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("something was stored at the owner's %s (%v)", JobURL(defaultOutput, j.ID), err)
	}
}
