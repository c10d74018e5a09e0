package jobs

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// firstWatchKept is the real state bucket, keeping the first watcher it makes so that a
// test can stop it under WatchCancels: its subscription closes and its updates channel
// with it, as when the connection drops it.
type firstWatchKept struct {
	jetstream.KeyValue
	mu    sync.Mutex
	first jetstream.KeyWatcher
}

func (k *firstWatchKept) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.Watch(ctx, keys, opts...)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil && k.first == nil {
		k.first = w
	}
	return w, err
}

// TestCancelWatchSurvivesItsEnd: when the cancel watch ends while the runner still lives,
// WatchCancels says so and watches again, and a cancel requested while nothing watched
// still arrives (the new watch replays the bucket), as do later ones; it stops with its
// context.
func TestCancelWatchSurvivesItsEnd(t *testing.T) {
	_, topo := connectTopology(t, natstest.Start(t), testTopology())
	kv := &firstWatchKept{KeyValue: topo.State.KV()}
	store := NewStateStore(kv)

	var mu sync.Mutex
	var seen []string
	lost := 0
	has := func(id string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(seen, id) }
	}
	ctx, cancel := context.WithCancel(t.Context())
	done, err := store.WatchCancels(ctx, func(id string) {
		mu.Lock()
		seen = append(seen, id)
		mu.Unlock()
	}, func(error) {
		mu.Lock()
		lost++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.RequestCancel(t.Context(), "before", "test"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the first cancel", has("before"))

	kv.mu.Lock()
	first := kv.first
	kv.mu.Unlock()
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := store.RequestCancel(t.Context(), "between", "test"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the cancel requested while the watch was down", has("between"))
	if err := store.RequestCancel(t.Context(), "after", "test"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "a cancel after the watch came back", has("after"))
	mu.Lock()
	if lost != 1 {
		t.Errorf("lost was called %d times, want once", lost)
	}
	mu.Unlock()

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not stop with its context")
	}
}
