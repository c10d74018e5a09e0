package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/locateanything/detect/jobs"
)

// maxActionIDs bounds the ids one action names.
const maxActionIDs = 10_000

// actionRequest names the jobs of a replay or cancel: ids, or a whole batch.
type actionRequest struct {
	IDs   []string `json:"ids"`
	Batch string   `json:"batch"`
}

func (a actionRequest) check() error {
	if (len(a.IDs) == 0) == (a.Batch == "") {
		return badRequest("name the jobs by ids or by batch, one of the two")
	}
	if len(a.IDs) > maxActionIDs {
		return badRequest("%d ids: at most %d at once", len(a.IDs), maxActionIDs)
	}
	for _, id := range a.IDs {
		if !jobs.ValidResultID(id) {
			return badRequest("job id %q must be 1-128 characters of [A-Za-z0-9_-], or seq=<n>", id)
		}
	}
	if a.Batch != "" && !jobs.ValidToken(a.Batch) {
		return badRequest("batch %q must be 1-128 characters of [A-Za-z0-9_-]", a.Batch)
	}
	return nil
}

type skipped struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// replay publishes dead-lettered jobs again (jobs.Replay, as `submit dlq replay` does):
// the ids named, or every job of the batch with a dead-letter record. A job without a
// record, or one Replay refuses, is skipped with the reason.
func (c *Console) replay(r *http.Request, b *backend, req actionRequest) (any, error) {
	ctx := r.Context()
	entries, err := readDLQ(ctx, b.js)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]dlqEntry, len(entries))
	for _, e := range entries {
		byID[e.record.ID] = e
	}
	ids := req.IDs
	if req.Batch != "" {
		for _, e := range entries {
			if e.record.Batch == req.Batch {
				ids = append(ids, e.record.ID)
			}
		}
	}
	out := struct {
		Replayed int       `json:"replayed"`
		Skipped  []skipped `json:"skipped"`
	}{Skipped: []skipped{}}
	defer b.dlq.forget()
	for _, id := range ids {
		e, ok := byID[id]
		if !ok {
			out.Skipped = append(out.Skipped, skipped{id, "not in the dead-letter queue"})
			continue
		}
		octx, cancel := context.WithTimeout(ctx, c.opts.OpTimeout)
		err := jobs.Replay(octx, b.js, b.state, c.opts.Store, e.seq, e.record)
		cancel()
		switch {
		case errors.Is(err, jobs.ErrNotReplayable):
			out.Skipped = append(out.Skipped, skipped{id, err.Error()})
		case err != nil:
			return nil, fmt.Errorf("after %d replayed: %w", out.Replayed, err)
		default:
			out.Replayed++
			c.log.Info("console: job replayed", "id", id, "batch", e.record.Batch, "code", e.record.Code)
		}
	}
	return out, nil
}

// cancel requests the cancel of the ids named, or of every job of the batch still in
// LA_JOBS: a queued job then ends canceled (with a canceled result) when a worker picks it
// up, a running one at its next decode step.
func (c *Console) cancel(r *http.Request, b *backend, req actionRequest) (any, error) {
	ctx := r.Context()
	n := 0
	request := func(id string) error {
		octx, cancel := context.WithTimeout(ctx, c.opts.OpTimeout)
		defer cancel()
		if err := b.state.RequestCancel(octx, id, "console"); err != nil {
			return err
		}
		n++
		return nil
	}
	for _, id := range req.IDs {
		if !jobs.ValidToken(id) {
			return nil, badRequest("job %s has no id of its own (its message had none): there is nothing to cancel", id)
		}
		if err := request(id); err != nil {
			return nil, err
		}
	}
	if req.Batch != "" {
		if err := queuedOf(ctx, b.js, req.Batch, func(j *jobs.Job) error { return request(j.ID) }); err != nil {
			return nil, fmt.Errorf("after %d canceled: %w", n, err)
		}
	}
	c.log.Info("console: cancel requested", "jobs", n, "batch", req.Batch)
	return map[string]int{"canceled": n}, nil
}
