package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestLockExcludesUntilUnlocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.lock")
	unlock, err := Lock(context.Background(), path, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description: a second open of the same path in
	// this process conflicts like another process would.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v, want it to wait until the deadline", err)
	}
	unlock()
	unlock2, err := Lock(context.Background(), path, time.Millisecond)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
