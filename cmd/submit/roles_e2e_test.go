package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/submit"
)

// TestEndToEndProducerRole: against a server that authenticates by role, submit runs a
// batch, looks jobs up and cancels with the producer's credentials alone (it writes no
// job state: that is the workers'), and its dead-letter commands say clearly that they
// need the operator's; with the operator's they work.
func TestEndToEndProducerRole(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	root := t.TempDir()
	sys := startSystem(t, enginetest.New(), systemOptions{fileRoot: root, roles: true})
	frames := filepath.Join(root, "frames")
	writeImages(t, frames, 3)
	out := filepath.Join(root, "out")

	code, stdout, _ := sys.submit(t, "--out", out, "--query", "cat", frames)
	if code != ExitOK || !strings.Contains(stdout, "3 submitted, 0 already done, 3 succeeded, 0 failed") {
		t.Fatalf("run as a producer: exit %d, %q", code, stdout)
	}
	rows := readResults(t, out)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	if code, stdout, _ = sys.submit(t, "status", rows[0].ID); code != ExitOK || !strings.Contains(stdout, "succeeded") {
		t.Errorf("status as a producer: exit %d, %q", code, stdout)
	}
	if code, _, _ = sys.submit(t, "status"); code != ExitOK {
		t.Errorf("status (overview) as a producer: exit %d", code)
	}
	if code, _, _ = sys.submit(t, "cancel", "not-yet-queued-1"); code != ExitOK {
		t.Errorf("cancel as a producer: exit %d", code)
	}

	t.Setenv("LA_NATS_TIMEOUT", "1s") // a refused request is never answered: it ends by its timeout
	code, _, stderr := sys.submit(t, "dlq", "list")
	if code == ExitOK || !strings.Contains(stderr, "NATS refused this user") || !strings.Contains(stderr, "operator") {
		t.Errorf("dlq list as a producer: exit %d, %q; want a refusal naming the operator role", code, stderr)
	}

	t.Setenv("LA_NATS_USER", rolesOperator[0])
	t.Setenv("LA_NATS_PASSWORD", rolesOperator[1])
	if code, stdout, _ = sys.submit(t, "dlq", "list"); code != ExitOK {
		t.Errorf("dlq list as the operator: exit %d, %q", code, stdout)
	}
}

func TestPermissionErrorUnwraps(t *testing.T) {
	inner := errors.New("timeout")
	if err := error(&submit.PermissionError{Refused: errors.New("refused"), Err: inner}); !errors.Is(err, inner) {
		t.Error("PermissionError hides what the command saw")
	}
}
