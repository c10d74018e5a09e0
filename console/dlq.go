package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// dlqEntry is one dead-letter record with its stream sequence.
type dlqEntry struct {
	seq    uint64
	record jobs.DLQRecord
}

// dlqView is LA_DLQ as the failures page shows it: the latest record of each job, read
// again when older than every. It is read whole rather than followed because a replay
// (from this console or `submit dlq replay`) purges records, which a follower would not
// see; the queue of failures is small next to the results.
type dlqView struct {
	js    jetstream.JetStream
	every time.Duration

	mu      sync.Mutex
	at      time.Time
	entries []dlqEntry // the latest record per job, oldest first
	err     error
}

func (d *dlqView) list(ctx context.Context) ([]dlqEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.at) >= d.every {
		entries, err := readDLQ(ctx, d.js)
		if err == nil {
			d.entries = entries
		}
		d.err, d.at = err, time.Now()
	}
	return d.entries, d.err
}

// forget makes the next list read the stream again (after a replay).
func (d *dlqView) forget() {
	d.mu.Lock()
	d.at = time.Time{}
	d.mu.Unlock()
}

// readDLQ reads every record of LA_DLQ and keeps the latest per job.
func readDLQ(ctx context.Context, js jetstream.JetStream) ([]dlqEntry, error) {
	latest := map[string]dlqEntry{}
	err := jobs.ReadStream(ctx, js, jobs.DLQStream, jobs.DLQSubjectPrefix+">", func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", jobs.DLQStream, err)
		}
		e := dlqEntry{seq: md.Sequence.Stream}
		if err := json.Unmarshal(m.Data(), &e.record); err != nil {
			e.record.ID = strings.TrimPrefix(m.Subject(), jobs.DLQSubjectPrefix)
			e.record.Reason = "unreadable record: " + err.Error()
		}
		if e.record.Batch == "" {
			e.record.Batch = jobs.DefaultBatch
		}
		latest[e.record.ID] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]dlqEntry, 0, len(latest))
	for _, e := range latest {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b dlqEntry) int { return cmp.Compare(a.seq, b.seq) })
	return out, nil
}
