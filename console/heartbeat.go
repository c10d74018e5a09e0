package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/engine"
)

// WorkersBucket is the key-value bucket where every worker says, per chip, that it is
// alive and what it runs (key <worker>.<chip>); the console lists it. Entries expire
// after WorkerTTL, so a worker that died drops out by itself.
const WorkersBucket = "LA_WORKERS"

// HeartbeatEvery is how often a worker writes its entries; WorkerTTL how long one lives.
const (
	HeartbeatEvery = 5 * time.Second
	WorkerTTL      = 6 * HeartbeatEvery
)

// Beat is one chip's heartbeat: the value of its entry in WorkersBucket.
type Beat struct {
	ID             string             `json:"id"` // the worker's name
	Chip           int                `json:"chip"`
	Engine         engine.BackendKind `json:"engine"` // cpu, ttnn or sim
	Model          string             `json:"model"`
	MaxBatch       int                `json:"max_batch"`
	Running        int                `json:"running"`         // sequences decoding now
	Waiting        int                `json:"waiting"`         // requests queued for the chip
	BatchOccupancy float64            `json:"batch_occupancy"` // Running / MaxBatch
	LastSeen       time.Time          `json:"last_seen"`
}

// workersKV opens (creating or updating) the workers bucket.
func workersKV(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      WorkersBucket,
		Description: "LocateAnything worker heartbeats (<worker>.<chip>), for the console",
		History:     1,
		TTL:         WorkerTTL,
		Storage:     jetstream.MemoryStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", WorkersBucket, err)
	}
	return kv, nil
}

// Heartbeats writes beats() every HeartbeatEvery until ctx ends, on a goroutine whose end
// closes done; each write's failure goes to log (NATS down: the next tick tries again).
// It returns once the bucket is there.
func Heartbeats(ctx context.Context, js jetstream.JetStream, replicas int, log *slog.Logger, beats func() []Beat) (done <-chan struct{}, err error) {
	kv, err := workersKV(ctx, js, replicas)
	if err != nil {
		return nil, err
	}
	d := make(chan struct{})
	beat := func() {
		for _, b := range beats() {
			b.LastSeen = time.Now().UTC()
			if b.MaxBatch > 0 {
				b.BatchOccupancy = float64(b.Running) / float64(b.MaxBatch)
			}
			v, _ := json.Marshal(b)
			wctx, cancel := context.WithTimeout(ctx, HeartbeatEvery)
			_, err := kv.Put(wctx, b.ID+"."+strconv.Itoa(b.Chip), v)
			cancel()
			if err != nil && ctx.Err() == nil {
				log.Warn("worker heartbeat not written", "bucket", WorkersBucket, "err", err)
			}
		}
	}
	beat()
	go func() {
		defer close(d)
		t := time.NewTicker(HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				beat()
			}
		}
	}()
	return d, nil
}

// liveWorkers is every heartbeat in the bucket younger than WorkerTTL, by worker and chip.
func liveWorkers(ctx context.Context, js jetstream.JetStream) ([]Beat, error) {
	kv, err := js.KeyValue(ctx, WorkersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return []Beat{}, nil // no worker has said anything yet
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", WorkersBucket, err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", WorkersBucket, err)
	}
	defer lister.Stop()
	out := []Beat{}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue // expired in between
		}
		var b Beat
		if json.Unmarshal(e.Value(), &b) != nil || time.Since(b.LastSeen) > WorkerTTL {
			continue
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Beat) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return a.Chip - b.Chip
	})
	return out, nil
}
