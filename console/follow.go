package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/storage"
)

// maxResultBytes bounds a stored result read back (a truncated message's whole result, a
// job opened in the console): a result is at most a message's metadata and an answer.
const maxResultBytes = 64 << 20

// follow folds every result on LA_RESULTS into x, from the first one held, until ctx
// ends: an ordered consumer, which JetStream recreates by itself after a disconnection
// and resumes where it left. A reference message (truncated) has its detections read from
// the stored result (best effort: the summary keeps none when that fails).
func follow(ctx context.Context, js jetstream.JetStream, store storage.Store, x *index, opTimeout time.Duration, lost func(error)) error {
	cons, err := js.OrderedConsumer(ctx, jobs.ResultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{jobs.ResultSubjectPrefix + ">"},
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", jobs.ResultsStream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("read %s: %w", jobs.ResultsStream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop) // Next returns once ctx ends
	defer stop()
	for {
		msg, err := it.Next()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return fmt.Errorf("read %s: the iterator closed", jobs.ResultsStream)
		}
		if err != nil {
			lost(fmt.Errorf("read %s: %w", jobs.ResultsStream, err))
			continue
		}
		var res jobs.Result
		if err := json.Unmarshal(msg.Data(), &res); err != nil {
			continue // not a result (someone else's message on the subject): nothing to show
		}
		if res.Truncated && store != nil && res.ResultURL != "" {
			if full, err := storedResult(ctx, store, res.ResultURL, opTimeout); err == nil && full.ID == res.ID {
				res = *full
				res.Truncated = true // the summary still says the message was a reference
			}
		}
		var seq uint64
		at := time.Now()
		if md, err := msg.Metadata(); err == nil {
			seq, at = md.Sequence.Stream, md.Timestamp
		}
		x.add(&res, len(msg.Data()), seq, at)
	}
}

// storedResult reads the whole result stored at url.
func storedResult(ctx context.Context, store storage.Store, url string, opTimeout time.Duration) (*jobs.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	b, err := store.Get(ctx, url, maxResultBytes)
	if err != nil {
		return nil, err
	}
	var res jobs.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("result %s is not valid JSON: %w", url, err)
	}
	return &res, nil
}
