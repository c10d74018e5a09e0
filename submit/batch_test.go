package submit

import (
	"errors"
	"testing"
)

// TestBadBatchIsAnArgumentError: a batch the job schema cannot carry, or one that is not the output
// directory's, is the user's mistake (an ArgumentError, exit 2), also when it reaches resolveBatch directly.
func TestBadBatchIsAnArgumentError(t *testing.T) {
	if _, err := resolveBatch("not a batch", &outState{}, t.TempDir()); err == nil || !errors.As(err, new(*ArgumentError)) {
		t.Fatalf("bad --batch: %v, want an exit-2 error", err)
	}
	prior := &outState{HasHeader: true, Header: stateHeader{Batch: "b1"}}
	if _, err := resolveBatch("b2", prior, "out"); err == nil || !errors.As(err, new(*ArgumentError)) {
		t.Fatalf("--batch of another output directory: %v, want an exit-2 error", err)
	}
}
