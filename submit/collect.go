package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
)

// collected is one result read from LA_RESULTS, or the error that ended the reading.
type collected struct {
	Result jobs.Result
	Err    error
}

// collectResults reads every result of batch from LA_RESULTS, oldest first, through an
// ordered consumer: it keeps no state on the server, resumes where it stopped after a
// disconnect, and on every run starts from the batch's first result, so nothing published
// while the tool was away is missed. Results are sent on out until ctx ends; the channel is closed on return.
// A message that is not a result is reported and skipped.
func collectResults(ctx context.Context, js jetstream.JetStream, batch string, out chan<- collected) {
	defer close(out)
	send := func(c collected) bool {
		select {
		case out <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	cons, err := js.OrderedConsumer(ctx, jobs.ResultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{jobs.ResultSubjectPrefix + batch + ".>"},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		send(collected{Err: fmt.Errorf("read results of batch %s from %s: %w", batch, jobs.ResultsStream, err)})
		return
	}
	it, err := cons.Messages()
	if err != nil {
		send(collected{Err: fmt.Errorf("read results of batch %s: %w", batch, err)})
		return
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			if !send(collected{Err: fmt.Errorf("read results of batch %s: %w", batch, err)}) {
				return
			}
			continue
		}
		var c collected
		if err := json.Unmarshal(msg.Data(), &c.Result); err != nil || !jobs.ValidToken(c.Result.ID) {
			c.Err = fmt.Errorf("result on %s is not a valid result: %v", msg.Subject(), err)
		}
		if !send(c) {
			return
		}
	}
}
