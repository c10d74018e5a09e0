package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CancelKeyPrefix starts the state-bucket key of a cancel request: cancel.<id>. Job ids
// contain no dots, so a cancel key never collides with a state key (<id>).
const CancelKeyPrefix = "cancel."

// CancelKey is the state-bucket key that requests cancelling job id.
func CancelKey(id string) string { return CancelKeyPrefix + id }

// State is the value of a job's entry (key <id>) in the state bucket.
type State struct {
	Status    Status    `json:"status"`
	Attempt   int       `json:"attempt,omitempty"`
	Worker    string    `json:"worker,omitempty"`
	Error     string    `json:"error,omitempty"`      // the failure code when failed
	LastError string    `json:"last_error,omitempty"` // why the last attempt failed for now (status queued)
	UpdatedAt time.Time `json:"updated_at"`
}

// CancelRequest is the value of a cancel.<id> entry. Any value requests the cancel; these
// fields are for people reading the bucket.
type CancelRequest struct {
	Reason      string    `json:"reason,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
}

// StateStore reads and writes job state and cancel requests in the state bucket.
type StateStore struct {
	kv jetstream.KeyValue
}

// NewStateStore wraps an existing bucket (EnsureTopology creates it).
func NewStateStore(kv jetstream.KeyValue) *StateStore { return &StateStore{kv: kv} }

// KV is the underlying bucket.
func (s *StateStore) KV() jetstream.KeyValue { return s.kv }

// Get returns job id's state; ok is false when the bucket has none.
func (s *StateStore) Get(ctx context.Context, id string) (st State, ok bool, err error) {
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read state of job %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return State{}, false, fmt.Errorf("state of job %s is not valid JSON: %w", id, err)
	}
	return st, true, nil
}

// Put records job id's state.
func (s *StateStore) Put(ctx context.Context, id string, st State) error {
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = time.Now().UTC()
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state of job %s: %w", id, err)
	}
	if _, err := s.kv.Put(ctx, id, b); err != nil {
		return fmt.Errorf("write state %s of job %s: %w", st.Status, id, err)
	}
	return nil
}

// RequestCancel asks the workers to cancel job id: a queued job ends canceled without
// running, a running one is stopped at its next decode step.
func (s *StateStore) RequestCancel(ctx context.Context, id, reason string) error {
	if !ValidToken(id) {
		return fmt.Errorf("cancel: job id %q must be 1-128 characters of [A-Za-z0-9_-]", id)
	}
	b, err := json.Marshal(CancelRequest{Reason: reason, RequestedAt: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("encode cancel request: %w", err)
	}
	if _, err := s.kv.Put(ctx, CancelKey(id), b); err != nil {
		return fmt.Errorf("write cancel request for job %s: %w", id, err)
	}
	return nil
}

// CancelRequested reports whether a cancel of job id has been requested.
func (s *StateStore) CancelRequested(ctx context.Context, id string) (bool, error) {
	_, err := s.kv.Get(ctx, CancelKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read cancel request of job %s: %w", id, err)
	}
	return true, nil
}

// rewatchPause is how long WatchCancels waits before watching again after its watch
// ended on its own.
const rewatchPause = time.Second

// WatchCancels calls fn with the id of every cancel requested from now on, until ctx ends.
// It returns once the watch is established; the watch itself runs on a goroutine that
// ends with ctx (done is closed then).
//
// A watch can end before ctx does: its subscription closes with the connection, and a
// cluster can drop it. Then lost (required) is called with why, and the bucket is watched again
// (rewatchPause apart while that fails). The new watch first replays every cancel request
// in the bucket, so one made while nothing watched still reaches fn; fn must accept ids
// it has seen or does not run (the runner's does).
func (s *StateStore) WatchCancels(ctx context.Context, fn func(id string), lost func(err error)) (done <-chan struct{}, err error) {
	w, err := s.kv.Watch(ctx, CancelKeyPrefix+"*", jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch cancel requests: %w", err)
	}
	d := make(chan struct{})
	go func() {
		defer close(d)
		for {
			followCancels(ctx, w, fn)
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			lost(errors.New("the cancel watch ended; watching again"))
			for w = nil; w == nil; {
				select {
				case <-ctx.Done():
					return
				case <-time.After(rewatchPause):
				}
				again, err := s.kv.Watch(ctx, CancelKeyPrefix+"*", jetstream.IgnoreDeletes())
				if err != nil {
					if ctx.Err() == nil { // not the shutdown itself
						lost(fmt.Errorf("watch cancel requests again: %w", err))
					}
					continue
				}
				w = again
			}
		}
	}()
	return d, nil
}

// followCancels passes w's cancel requests to fn until ctx ends or w's updates close.
func followCancels(ctx context.Context, w jetstream.KeyWatcher, fn func(id string)) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil { // nil marks the end of a replay
				fn(e.Key()[len(CancelKeyPrefix):])
			}
		}
	}
}
