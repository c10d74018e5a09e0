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

func TestTryLockNamesTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := TryLock(path, "pid 123")
	if err != nil {
		t.Fatal(err)
	}
	// a second open of the same path conflicts like another process would
	_, err = TryLock(path, "pid 456")
	var held *HeldError
	if !errors.As(err, &held) || held.Note != "pid 123" || held.Path != path {
		t.Fatalf("TryLock while held: %v, want a HeldError with the holder's note %q", err, "pid 123")
	}
	unlock()
	unlock2, err := TryLock(path, "pid 456")
	if err != nil {
		t.Fatalf("TryLock after unlock: %v", err)
	}
	defer unlock2()
	if _, err := TryLock(path, "pid 789"); !errors.As(err, &held) || held.Note != "pid 456" {
		t.Fatalf("TryLock after a new holder: %v, want its note %q (the old one replaced)", err, "pid 456")
	}
}

func TestTryLockRefusesAMissingDirectory(t *testing.T) {
	_, err := TryLock(filepath.Join(t.TempDir(), "gone", "x.lock"), "pid 1")
	var held *HeldError
	if err == nil || errors.As(err, &held) {
		t.Fatalf("TryLock in a missing directory: %v, want an error that is not HeldError", err)
	}
}
