package submit

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

// collected is one result read from LA_RESULTS, or the error that ended the reading.
type collected struct {
	Result jobs.Result
	Err    error
}

// collectResults reads every result of batch from LA_RESULTS, oldest first, through an
// ordered consumer: it keeps no state on the server, resumes where it stopped after a
// disconnect, and on every run starts from the batch's first result, so nothing published
// while the tool was away is missed. Results are sent on out until ctx ends; the channel is closed on return.
// A message that is not a result is reported and skipped. A result too large for a message
// was published as a reference (truncated, result_url): the whole result is read from
// store instead (fullResult).
func collectResults(ctx context.Context, js jetstream.JetStream, store storage.Store, batch string, out chan<- collected) {
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
		if err := json.Unmarshal(msg.Data(), &c.Result); err != nil || !jobs.ValidResultID(c.Result.ID) {
			c.Err = fmt.Errorf("result on %s is not a valid result: %v", msg.Subject(), err)
		} else if c.Result.Truncated {
			warn := func(err error) bool { return send(collected{Err: err}) }
			if c.Result, err = fullResult(ctx, store, c.Result, warn); err != nil {
				if ctx.Err() != nil || !warn(fmt.Errorf("%w; the row keeps the reference", err)) {
					return
				}
			}
		}
		if !send(c) {
			return
		}
	}
}

// maxResultBytes bounds a result read from storage: a job's metadata (under a NATS
// message) and the answer.
const maxResultBytes = 64 << 20

// fullResult reads the whole result that ref, a reference published in its place (see
// docs/wire-contract.md, "Results larger than a message"), names in result_url. While
// storage fails for now it tries again, waiting longer each time (up to 30 s) and telling
// warn, until ctx ends or warn returns false. When it cannot (no result_url, no storage
// configured, storage refuses for good, the object is not that job's result, or warn
// declined a retry) it returns ref itself with the reason.
func fullResult(ctx context.Context, store storage.Store, ref jobs.Result, warn func(error) bool) (jobs.Result, error) {
	switch {
	case ref.ResultURL == "":
		return ref, fmt.Errorf("result of job %s was too large to publish and was not stored", ref.ID)
	case store == nil:
		return ref, fmt.Errorf("result of job %s is at %s: storage is not configured (LA_S3_* or LA_FILE_ROOTS)", ref.ID, ref.ResultURL)
	}
	wait := time.Second
	for {
		gctx, cancel := context.WithTimeout(ctx, time.Minute)
		data, err := store.Get(gctx, ref.ResultURL, maxResultBytes)
		cancel()
		if err == nil {
			var full jobs.Result
			if err := json.Unmarshal(data, &full); err != nil || full.ID != ref.ID {
				return ref, fmt.Errorf("result of job %s: %s is not its result (%v)", ref.ID, ref.ResultURL, err)
			}
			full.Truncated = false
			return full, nil
		}
		err = fmt.Errorf("result of job %s: read %s: %w", ref.ID, ref.ResultURL, err)
		if storage.Permanent(err) || ctx.Err() != nil {
			return ref, err
		}
		if !warn(fmt.Errorf("%w; trying again in %s", err, wait)) {
			return ref, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ref, ctx.Err()
		}
		wait = min(2*wait, 30*time.Second)
	}
}
