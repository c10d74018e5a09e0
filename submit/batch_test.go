package submit

import (
	"errors"
	"testing"
)

// TestBadBatchIsAnInputError: a batch the job schema cannot carry, or one that is not the output
// directory's, is the user's mistake (an InputError, exit 2), also when it reaches resolveBatch directly.
func TestBadBatchIsAnInputError(t *testing.T) {
	if _, err := resolveBatch("not a batch", &outState{}, t.TempDir()); err == nil || !errors.As(err, new(*InputError)) {
		t.Fatalf("bad --batch: %v, want an exit-2 error", err)
	}
	prior := &outState{HasHeader: true, Header: stateHeader{Batch: "b1"}}
	if _, err := resolveBatch("b2", prior, "out"); err == nil || !errors.As(err, new(*InputError)) {
		t.Fatalf("--batch of another output directory: %v, want an exit-2 error", err)
	}
}
