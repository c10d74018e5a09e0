package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReadStream calls fn for every message of stream on subject, oldest first, through an
// ordered consumer, and returns when it has read what the stream held when it started.
// The administrative readers (submit's commands, the web console) go through it.
func ReadStream(ctx context.Context, js jetstream.JetStream, stream, subject string, fn func(jetstream.Msg) error) error {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	if info.NumPending == 0 {
		return nil // nothing to read: Next would wait for a message that never comes
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		if err := fn(msg); err != nil {
			return err
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		if md.NumPending == 0 {
			return nil
		}
	}
}

// QueuedJobs calls fn for every decodable job message in LA_JOBS, oldest first, with the
// time it was published and its batch named as the worker names it (DefaultBatch when the
// message has none), so that a reader looking for batch "default" finds those jobs too. LA_JOBS is a work queue, which allows no second consumer over
// all its subjects, so the messages are read one by one with direct gets ("the next
// message at or after this sequence"); a message that is not a valid job is passed over
// (a worker will dead-letter it).
func QueuedJobs(ctx context.Context, js jetstream.JetStream, fn func(*Job, time.Time) error) error {
	st, err := js.Stream(ctx, JobsStream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", JobsStream, err)
	}
	for seq := uint64(1); ; {
		msg, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(JobSubjectPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s at sequence %d: %w", JobsStream, seq, err)
		}
		seq = msg.Sequence + 1
		j, err := DecodeJob(msg.Data)
		if err != nil || j == nil {
			continue
		}
		if j.Batch == "" {
			j.Batch = DefaultBatch
		}
		if err := fn(j, msg.Time); err != nil {
			return err
		}
	}
}
