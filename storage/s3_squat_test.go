package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/locateanything/detect/storage"
)

// TestS3PutRefusesAPrefixNamedLikeAResult: as file:// refuses to create a folder named
// victim-1.json, S3 refuses a key below the prefix victim-1.json/ (on versitygw's posix
// backend that prefix is a folder, and the object victim-1.json could no longer be
// written); the victim's own object is then written and read back.
func TestS3PutRefusesAPrefixNamedLikeAResult(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	for _, u := range []string{"s3://images/out/victim-1.json/squatter.json", "s3://images/victim-1.png/x/squatter.json"} {
		if err := store.Put(ctx, u, []byte("{}"), "application/json"); !errors.Is(err, storage.ErrNotAllowed) {
			t.Errorf("Put %s: %v, want ErrNotAllowed", u, err)
		}
	}
	for _, u := range []string{"s3://images/out/victim-1.json", "s3://images/victim-1.png"} {
		if err := store.Put(ctx, u, []byte("mine"), ""); err != nil {
			t.Errorf("the victim's Put %s: %v", u, err)
		}
		if got, err := store.Get(ctx, u, 0); err != nil || string(got) != "mine" {
			t.Errorf("Get %s = %q, %v", u, got, err)
		}
	}
}

// TestS3Delete: Delete removes an object, and is quiet about one that is not there.
func TestS3Delete(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	const u = "s3://images/out/a.png"
	if err := store.Put(ctx, u, []byte("overlay"), "image/png"); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, u); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := store.Get(ctx, u, 0); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := store.Delete(ctx, u); err != nil {
		t.Errorf("Delete of a missing object: %v, want nil", err)
	}
}
