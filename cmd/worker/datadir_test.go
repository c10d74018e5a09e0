package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/internal/flock"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/worker"
)

// TestWorkerOnABusyDataDirExits2: when another worker holds LA_DATA_DIR's lock, `worker`
// exits 2 (a configuration error) and says whose it is.
func TestWorkerOnABusyDataDirExits2(t *testing.T) {
	dir := t.TempDir()
	unlock, err := flock.TryLock(filepath.Join(dir, worker.DataDirLockFile), "pid 4242, worker other")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	t.Setenv("LA_DATA_DIR", dir)
	t.Setenv("LA_NATS_LISTEN", freeport.MustAddr(t))
	t.Setenv("LA_METRICS_ADDR", "off")
	t.Setenv("LA_HTTP_ADDR", "127.0.0.1:0")
	t.Setenv("LA_LOG_FORMAT", "text")
	var stdout, stderr bytes.Buffer
	code := realMain(nil, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "pid 4242") || !strings.Contains(stderr.String(), "in use by another worker") {
		t.Errorf("exit %d, stderr %q; want 2 and the other worker's pid", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Application startup failed") {
		t.Errorf("stdout %q: want the launcher's failure landmark", stdout.String())
	}
}
