//go:build linux

package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// workerEnv is the configuration every worker here starts from: the bundled tiny model on
// one thread with a small patch budget and token budget (about 0.1-0.2 s a job), short
// ack waits and retry delays so that faults resolve in seconds, and no HTTP or metrics
// listener unless a scenario asks. Scenarios add where NATS and the images are.
func workerEnv(name, dataDir string) map[string]string {
	return map[string]string{
		"LA_WORKER_NAME":     name,
		"LA_WEIGHTS_DIR":     tinyModel,
		"LA_ENGINE":          "cpu",
		"LA_THREADS":         "1",
		"LA_IN_TOKEN_LIMIT":  "64",
		"LA_MAX_NEW_TOKENS":  "8",
		"LA_HTTP_ADDR":       "off",
		"LA_METRICS_ADDR":    "off",
		"LA_LOG_FORMAT":      "json",
		"LA_DATA_DIR":        dataDir,
		"LA_PREFETCH":        "2",
		"LA_POLL_WAIT":       "250ms",
		"LA_ACK_WAIT":        "5s",
		"LA_BACKOFF":         "", // redelivery after LA_ACK_WAIT each time
		"LA_MAX_DELIVER":     "20",
		"LA_RETRY_DELAY":     "500ms",
		"LA_RETRY_DELAY_MAX": "4s",
		"LA_OP_TIMEOUT":      "5s",
		"LA_GRACE":           "10s",
		"LA_NATS_TIMEOUT":    "5s",
	}
}

// worker is the real worker binary, started (and restarted) with one configuration.
type worker struct {
	name    string
	dir     string // working directory and HOME
	env     map[string]string
	ps      *procs
	logPath string
	proc    *proc // the current run
	starts  int
}

func newWorker(t testing.TB, ps *procs, name, dir string, env map[string]string) *worker {
	t.Helper()
	return &worker{name: name, dir: mkdir(t, dir), env: env, ps: ps, logPath: filepath.Join(dir, name+".log")}
}

func (w *worker) environ() []string {
	env := baseEnv(w.dir)
	keys := make([]string, 0, len(w.env))
	for k := range w.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+w.env[k])
	}
	return env
}

// start runs the worker and waits for its landmark line (the engine is loaded, NATS
// connected, the topology in place and the Runners started).
func (w *worker) start(t testing.TB) {
	t.Helper()
	p, err := startProc(t, w.name, w.dir, w.logPath, w.environ(), workerBin)
	if err != nil {
		t.Fatal(err)
	}
	w.ps.add(p)
	w.proc = p
	w.starts++
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(p.stdout.String(), "Application startup complete.") {
		if !p.alive() || strings.Contains(p.stdout.String(), "startup failed") {
			p.expected.Store(true)
			t.Fatalf("worker %s did not start: %v; log:\n%s", w.name, p.waitErr, tail(w.logPath, 30))
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s not ready within 2 minutes; log:\n%s", w.name, tail(w.logPath, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill9 kills the worker (and its embedded NATS server, if it runs one) with SIGKILL.
func (w *worker) kill9(t testing.TB) {
	t.Helper()
	t.Logf("kill -9 worker %s (pid %d)", w.name, w.proc.pid())
	w.proc.kill9(t)
}

// term sends SIGTERM and waits up to within for the exit; it returns the exit code and
// how long the drain took.
func (w *worker) term(t testing.TB, within time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	w.proc.signal(syscall.SIGTERM)
	code, err := w.proc.waitExit(within)
	if err != nil {
		t.Fatalf("SIGTERM: %v; log:\n%s", err, tail(w.logPath, 30))
	}
	return code, time.Since(start)
}

// log is everything the worker wrote in all its runs.
func (w *worker) log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkLog fails the test for a Go panic or fatal error in the worker's log: a hostile
// input may fail a job, never crash the process.
func (w *worker) checkLog(t testing.TB) {
	t.Helper()
	log := w.log(t)
	for _, bad := range []string{"panic: ", "fatal error: ", "SIGSEGV", "DATA RACE"} {
		if strings.Contains(log, bad) {
			t.Errorf("worker %s log contains %q:\n%s", w.name, bad, tail(w.logPath, 60))
		}
	}
}

func (w *worker) String() string { return fmt.Sprintf("worker %s", w.name) }
