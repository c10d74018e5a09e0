package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
)

// TestSecondWorkerOnTheDataDirIsRefused: while one worker runs on LA_DATA_DIR, a second
// one given the same directory (on another NATS port) stops at once with
// DataDirBusyError naming the first one's pid, before it opens anything; the first one
// runs on undisturbed.
func TestSecondWorkerOnTheDataDirIsRefused(t *testing.T) {
	dataDir := t.TempDir()
	addr := freeport.MustAddr(t)
	cfg := singleMachineConfig(t, dataDir, addr)
	startWorker(t, cfg, enginetest.New())
	lock := filepath.Join(dataDir, DataDirLockFile)
	testwait.Until(t, 30*time.Second, "the first worker holds LA_DATA_DIR", func() bool {
		b, _ := os.ReadFile(lock)
		return strings.Contains(string(b), "pid ")
	})

	second := cfg
	second.Embedded.Listen = freeport.MustAddr(t)
	second.Runner.WorkerName = "w2"
	began := time.Now()
	err := Run(t.Context(), second, Options{Log: slog.New(slog.DiscardHandler), Open: fixedEngine(enginetest.New())})
	var busy *DataDirBusyError
	if !errors.As(err, &busy) {
		t.Fatalf("second worker on the same LA_DATA_DIR: %v; want DataDirBusyError", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the refusal took %s; want it at once", took)
	}
	pid := fmt.Sprintf("pid %d, worker w1", os.Getpid())
	if busy.Dir != dataDir || !strings.Contains(err.Error(), pid) || !strings.Contains(err.Error(), dataDir) {
		t.Errorf("error %q (dir %q): want the directory and the holder %q", err, busy.Dir, pid)
	}
	if b, _ := os.ReadFile(lock); !strings.Contains(string(b), "worker w1") {
		t.Errorf("lock file %q: the refused worker overwrote the holder's note", b)
	}

	// the first worker still answers jobs
	publishJob(t, publisher(t, addr), "after-refusal", "red circle")
	testwait.Until(t, time.Minute, "the first worker's result", func() bool {
		r, ok := readResult(t, dataDir, "after-refusal")
		return ok && r.Status == jobs.StatusSucceeded
	})
}
