package launcher

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/httpcompat"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/syncbuf"
)

// uvicornPythons are tried in order; Debian's python3-uvicorn installs for /usr/bin/python3.
var uvicornPythons = []string{"/usr/bin/python3", "python3"}

// bootLimit bounds each wait below so a broken worker fails the test instead of hanging it;
// it is not a performance assertion.
const bootLimit = 3 * time.Minute

// TestUvicornBecomesTheWorker runs tt-model's launch command for kind tt-dit-server,
// `python3 -m uvicorn --host H --port P --lifespan on la_launcher.app:app`, with the real
// uvicorn and the real worker binary, and checks that the process uvicorn started is the
// worker serving /health on H:P, that it prints the readiness landmark once, and that
// SIGTERM stops it cleanly.
func TestUvicornBecomesTheWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and boots it: not in -short")
	}
	python := findUvicornPython(t)
	worker := buildWorker(t)

	port := freeport.MustPort(t)
	cmd := exec.Command(python, "-m", "uvicorn", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--lifespan", "on", "la_launcher.app:app")
	cmd.Env = append(inheritedEnv(),
		"PYTHONPATH="+mustAbs(t, "."),
		"LA_WORKER_BIN="+worker,
		"LA_WEIGHTS_DIR="+mustAbs(t, "../testdata/checkpoints/tiny-bf16"),
		"LA_DATA_DIR="+t.TempDir(),
		"LA_NATS_LISTEN=127.0.0.1:"+strconv.Itoa(freeport.MustPort(t)), // the embedded single-machine NATS
		"LA_METRICS_ADDR=127.0.0.1:"+strconv.Itoa(freeport.MustPort(t)),
		"LA_ENGINE=cpu",
	)
	var log syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start uvicorn: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("process output:\n%s", log.String())
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHealthy(base, done); err != nil {
		t.Fatal(err)
	}

	pid := cmd.Process.Pid
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("read the executable of PID %d: %v", pid, err)
	}
	if exe != worker {
		t.Errorf("PID %d (started as python3 -m uvicorn) runs %s, want the worker %s", pid, exe, worker)
	}
	owns, err := ownsListener(pid, port)
	if err != nil {
		t.Fatal(err)
	}
	if !owns {
		t.Errorf("PID %d does not hold the socket listening on port %d", pid, port)
	}

	if n := countLines(log.String(), httpcompat.StartupCompleteLine); n != 1 {
		t.Errorf("startup landmark %q printed %d times, want once", httpcompat.StartupCompleteLine, n)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM the worker ended with %v, want exit status 0", err)
		}
	case <-time.After(bootLimit):
		t.Fatalf("the worker did not stop within %s of SIGTERM", bootLimit)
	}
}

// TestUvicornWorkerStartupFailure: when the engine cannot start, the launched worker prints
// uvicorn's failure landmark and exits non-zero, which is how tt-model learns a boot failed.
func TestUvicornWorkerStartupFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and boots it: not in -short")
	}
	python := findUvicornPython(t)
	worker := buildWorker(t)
	cmd := exec.Command(python, "-m", "uvicorn", "--host", "127.0.0.1", "--port="+strconv.Itoa(freeport.MustPort(t)),
		"--lifespan", "on", "la_launcher.app:app")
	cmd.Env = append(inheritedEnv(),
		"PYTHONPATH="+mustAbs(t, "."),
		"LA_WORKER_BIN="+worker,
		"LA_WEIGHTS_DIR="+t.TempDir(), // no checkpoint in it
		"LA_DATA_DIR="+t.TempDir(),
		"LA_NATS_LISTEN=127.0.0.1:"+strconv.Itoa(freeport.MustPort(t)),
		"LA_METRICS_ADDR=127.0.0.1:"+strconv.Itoa(freeport.MustPort(t)),
		"LA_ENGINE=cpu",
	)
	var log syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start uvicorn: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the worker exited 0 without a model")
		}
	case <-time.After(bootLimit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the worker did not give up within %s", bootLimit)
	}
	out := log.String()
	if countLines(out, httpcompat.StartupFailedLine) != 1 || countLines(out, httpcompat.StartupCompleteLine) != 0 {
		t.Errorf("want the failure landmark %q once and no startup-complete line; output:\n%s", httpcompat.StartupFailedLine, out)
	}
}

// TestLauncherPythonUnitTests runs launcher/test_app.py (argument parsing, refusals, the
// exec through uvicorn with a stand-in worker) so CI runs them with the Go tests.
func TestLauncherPythonUnitTests(t *testing.T) {
	python := findUvicornPython(t)
	cmd := exec.Command(python, "-m", "unittest", "-v", "test_app")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest test_app: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("\nOK")) {
		t.Fatalf("unittest did not report OK:\n%s", out)
	}
}

func findUvicornPython(t *testing.T) string {
	t.Helper()
	for _, p := range uvicornPythons {
		if exec.Command(p, "-c", "import uvicorn").Run() == nil {
			return p
		}
	}
	t.Fatalf("no python3 with uvicorn among %v: install Debian's package with `apt-get install -y python3-uvicorn`", uvicornPythons)
	return ""
}

func buildWorker(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "la-worker")
	build := exec.Command("go", "build", "-o", out, "./cmd/worker")
	build.Dir = ".."
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/worker: %v\n%s", err, msg)
	}
	return out
}

// inheritedEnv is the test's environment without variables that would change what is
// under test (a developer's LA_NATS_URL, UVICORN_PORT, ...).
func inheritedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LA_") || strings.HasPrefix(kv, "UVICORN_") || strings.HasPrefix(kv, "WEB_CONCURRENCY=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// waitHealthy polls GET /health until it says ok, the process exits, or bootLimit passes.
func waitHealthy(base string, exited <-chan error) error {
	deadline := time.Now().Add(bootLimit)
	client := &http.Client{Timeout: 5 * time.Second}
	last := "no answer yet"
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("the process exited before /health said ok (%v); last /health: %s", err, last)
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := client.Get(base + "/health")
		if err != nil {
			last = err.Error()
			continue
		}
		var health struct {
			Status string `json:"status"`
		}
		err = json.NewDecoder(resp.Body).Decode(&health)
		resp.Body.Close()
		if err != nil {
			last = "undecodable: " + err.Error()
			continue
		}
		last = health.Status
		if health.Status == "ok" {
			return nil
		}
	}
	return fmt.Errorf("/health did not say ok within %s (last: %s)", bootLimit, last)
}

// ownsListener reports whether one of pid's file descriptors is the TCP socket listening on port.
func ownsListener(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := listeningInodes(table, port, inodes); err != nil {
			return false, err
		}
	}
	if len(inodes) == 0 {
		return false, fmt.Errorf("nothing listens on port %d", port)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, fmt.Errorf("list the descriptors of PID %d: %w", pid, err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return true, nil
		}
	}
	return false, nil
}

// listeningInodes adds the inodes of sockets in LISTEN state (0A) on port from a /proc/net/tcp* table.
func listeningInodes(table string, port int, into map[string]bool) error {
	data, err := os.ReadFile(table)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		p, err := strconv.ParseUint(hexPort, 16, 32)
		if ok && err == nil && int(p) == port && f[3] == "0A" {
			into[f[9]] = true
		}
	}
	return sc.Err()
}

func countLines(text, line string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimRight(l, "\r") == line {
			n++
		}
	}
	return n
}
