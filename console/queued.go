package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// Bounds of the queued-job lookup. LA_JOBS is a work queue whose subjects name the job
// class, not the id (la.jobs.<class>), and JetStream finds no message by its Nats-Msg-Id,
// so the console keeps an index of the ids it has read there: the pending-per-batch scan
// (queue.go) fills it as it reads every job message anyway, and a lookup that misses reads
// on from where the index ends, at most catchUpMax messages per request, and keeps what it
// read. The index holds at most maxScan ids (the scan's own bound): a map of two 64-bit
// words each, some tens of bytes with the map's own overhead.
const (
	catchUpMax = 10_000
	// recentMax is how many of the newest sequences a lookup still reads when its catch-up
	// stopped short: the job someone has just submitted is found at once.
	recentMax = 1_000
)

// queuedIndex maps the ids of job messages read in LA_JOBS to their stream sequences.
// An entry may be stale (the job has since been acknowledged and removed): a lookup reads
// the message again by its sequence, so the answer is what the stream holds now.
type queuedIndex struct {
	seed maphash.Seed
	// turn is held by the one lookup reading the stream (waited for with the request's
	// context); mu only around the index's fields, never across a read, so the queue
	// view's scan (scanned) does not wait on a lookup's reads.
	turn chan struct{}

	mu      sync.Mutex // guards the fields below
	seqs    map[uint64]uint64
	through uint64 // every job message up to this sequence has been read into seqs
}

func newQueuedIndex() *queuedIndex {
	return &queuedIndex{seed: maphash.MakeSeed(), turn: make(chan struct{}, 1), seqs: map[uint64]uint64{}}
}

func (x *queuedIndex) seqOf(k uint64) (uint64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	seq, ok := x.seqs[k]
	return seq, ok
}

func (x *queuedIndex) forget(k uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.seqs, k)
}

func (x *queuedIndex) put(k, seq uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seqs[k] = seq
}

// readThrough is the sequence every message up to which the index has read, reset first
// when the stream now ends before it (LA_JOBS purged or made again: its sequences
// start over, and what the index holds names other messages).
func (x *queuedIndex) readThrough(last uint64) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if last < x.through {
		x.seqs, x.through = map[uint64]uint64{}, 0
	}
	return x.through
}

func (x *queuedIndex) readUpTo(seq uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.through = max(x.through, seq)
}

func (x *queuedIndex) key(id string) uint64 { return maphash.String(x.seed, id) }

// queuedJob is a job message still in LA_JOBS: queued, or handed to a worker that has not
// acknowledged it yet.
type queuedJob struct {
	Sequence    uint64    `json:"sequence"`
	Subject     string    `json:"subject"`
	PublishedAt time.Time `json:"published_at"`

	batch string
	data  json.RawMessage // the job's bytes when they are JSON, else nil
}

// jobKey is the id the workers give the job message at seq (as jobs.fallbackJob does): its
// id when valid, else its Nats-Msg-Id when valid, else jobs.SeqKey(seq); its batch as it
// names it (jobs.DefaultBatch when it names none); and whether it is a JSON object at all.
func jobKey(data []byte, hdr nats.Header, seq uint64) (id, batch string, isJSON bool) {
	var j struct {
		ID    string `json:"id"`
		Batch string `json:"batch"`
	}
	isJSON = json.Unmarshal(data, &j) == nil // bytes that are no job still have a key
	switch {
	case jobs.ValidToken(j.ID):
		id = j.ID
	case jobs.ValidToken(hdr.Get(nats.MsgIdHdr)):
		id = hdr.Get(nats.MsgIdHdr)
	default:
		id = jobs.SeqKey(seq)
	}
	return id, cmp.Or(j.Batch, jobs.DefaultBatch), isJSON
}

func queuedOfMsg(msg *jetstream.RawStreamMsg, batch string) *queuedJob {
	q := &queuedJob{Sequence: msg.Sequence, Subject: msg.Subject, PublishedAt: msg.Time.UTC(), batch: batch}
	if json.Valid(msg.Data) {
		q.data = msg.Data
	}
	return q
}

// scanned replaces the index with what a scan of every job message read (ids to sequences,
// through the sequence it read last), keeping what lookups read after that.
func (x *queuedIndex) scanned(seqs map[uint64]uint64, through uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, s := range x.seqs {
		if s > through {
			seqs[k] = s
		}
	}
	// The scan read the stream as it is now: its through replaces a larger one left by a
	// stream that was purged or made again since (a lookup then reads on again).
	x.seqs, x.through = seqs, through
}

// lookup is job id's message in LA_JOBS, nil when it is not there. unread is how many
// sequences of the stream the index had not read when the lookup gave up (0 when the
// answer is sure): past catchUpMax messages, out of time, or with the index full.
func (x *queuedIndex) lookup(ctx context.Context, js jetstream.JetStream, id string) (q *queuedJob, unread uint64, err error) {
	st, err := js.Stream(ctx, jobs.JobsStream)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", jobs.JobsStream, err)
	}
	if n, ok := strings.CutPrefix(id, "seq="); ok { // a worker-made key names its sequence
		seq, err := strconv.ParseUint(n, 10, 64)
		if err != nil || seq == 0 {
			return nil, 0, badRequest("job id %q: no such stream sequence", id)
		}
		q, err := x.at(ctx, st, seq, id)
		return q, 0, err
	}
	state := st.CachedInfo().State // as of js.Stream's request just now
	first, last := state.FirstSeq, state.LastSeq
	k := x.key(id)
	select {
	case x.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("waiting for another job lookup to read %s: %w", jobs.JobsStream, ctx.Err())
	}
	defer func() { <-x.turn }()
	through := x.readThrough(last)
	if seq, ok := x.seqOf(k); ok {
		if q, err := x.at(ctx, st, seq, id); q != nil || err != nil {
			return q, 0, err
		}
		x.forget(k) // acknowledged since: a replay's message may lie further on
	}
	// Catch up: read the job messages the index has not seen, oldest first.
	var found *queuedJob
	seq := max(through+1, first)
	for n, room := 0, x.room(first); seq <= last && n < room; n++ {
		msg, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(jobs.JobSubjectPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			seq = last + 1 // nothing more at or after seq
			break
		}
		if err != nil && ctx.Err() != nil {
			break // out of time: what was read stays read
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read %s at sequence %d: %w", jobs.JobsStream, seq, err)
		}
		mid, batch, _ := jobKey(msg.Data, msg.Header, msg.Sequence)
		x.put(x.key(mid), msg.Sequence)
		if mid == id {
			found = queuedOfMsg(msg, batch) // read on: a later message may hold the same id
		}
		seq = msg.Sequence + 1
	}
	x.readUpTo(min(seq, last+1) - 1)
	if found != nil {
		return found, 0, nil
	}
	through = x.readThrough(last)
	if through >= last {
		return nil, 0, nil
	}
	// Stopped short: the newest messages still, most recent first, without indexing them
	// (the catch-up will, in order).
	for s := last; s > through && s+recentMax > last && ctx.Err() == nil; s-- {
		if q, err := x.at(ctx, st, s, id); q != nil || err != nil {
			return q, 0, err
		}
	}
	return nil, last - through, nil
}

// room is how many ids the index may take now, at most catchUpMax: when that many would
// take it past maxScan, it first drops the ids below the stream's first sequence (their
// jobs were acknowledged and are gone).
func (x *queuedIndex) room(first uint64) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.seqs)+catchUpMax > maxScan {
		for k, s := range x.seqs {
			if s < first {
				delete(x.seqs, k)
			}
		}
	}
	return max(0, min(catchUpMax, maxScan-len(x.seqs)))
}

// at is the job message at sequence seq when it is still in LA_JOBS and its id is id.
func (x *queuedIndex) at(ctx context.Context, st jetstream.Stream, seq uint64, id string) (*queuedJob, error) {
	msg, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s at sequence %d: %w", jobs.JobsStream, seq, err)
	}
	if !strings.HasPrefix(msg.Subject, jobs.JobSubjectPrefix) {
		return nil, nil
	}
	if mid, batch, _ := jobKey(msg.Data, msg.Header, msg.Sequence); mid == id {
		return queuedOfMsg(msg, batch), nil
	}
	return nil, nil
}
