package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/locateanything/detect/internal/flock"
)

// DataDirLockFile is the file in LA_DATA_DIR that the running worker holds an flock(2) on
// and into which it writes its pid, so that a second worker on the same directory can say
// who has it.
const DataDirLockFile = "worker.lock"

// DataDirBusyError is Run's error when another worker holds LA_DATA_DIR: two workers on
// one directory would open the same embedded JetStream store and write the same results.
// The worker exits 2 on it, as on any other configuration error.
type DataDirBusyError struct {
	Dir    string
	Holder string // the other worker's note: "pid N, worker NAME"
}

func (e *DataDirBusyError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "which has not yet written its pid"
	}
	return fmt.Sprintf("LA_DATA_DIR %s is in use by another worker (%s); stop it, or give this worker its own LA_DATA_DIR", e.Dir, holder)
}

// lockDataDir takes LA_DATA_DIR for this worker, first of all the phases, so that nothing
// of a second worker's touches the first one's store. The lock goes with the process:
// a worker killed with -9 leaves nothing that blocks the next start.
func (s *service) lockDataDir(context.Context) error {
	dir := s.cfg.DataDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("LA_DATA_DIR: %w", err)
	}
	note := fmt.Sprintf("pid %d, worker %s", os.Getpid(), s.cfg.Runner.WorkerName)
	unlock, err := flock.TryLock(filepath.Join(dir, DataDirLockFile), note)
	var held *flock.HeldError
	if errors.As(err, &held) {
		return &DataDirBusyError{Dir: dir, Holder: held.Note}
	}
	if err != nil {
		return fmt.Errorf("LA_DATA_DIR: %w", err)
	}
	s.unlockDataDir = unlock
	return nil
}
