//go:build linux

package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/internal/syncbuf"
	"github.com/locateanything/detect/internal/tiedproc"
)

// proc is one run of a subprocess: the worker, a nats-server or versitygw. Its stdout
// and stderr go to a log file (kept in the test's directory, its tail printed when the test
// fails); stdout is also kept in memory for the worker's landmark line. An exit the test
// did not cause (kill, SIGTERM) fails the test: a crash is a finding, never noise.
type proc struct {
	name    string
	cmd     *exec.Cmd
	stdout  *syncbuf.Buffer
	logPath string
	exited  chan struct{}
	state   *os.ProcessState // set before exited is closed
	waitErr error
	started time.Time

	expected atomic.Bool // the test killed or stopped it
}

// startProc starts bin with args in dir, its environment exactly env.
func startProc(t testing.TB, name, dir, logPath string, env []string, bin string, args ...string) (*proc, error) {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "==== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	p := &proc{name: name, stdout: &syncbuf.Buffer{}, logPath: logPath, exited: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = io.MultiWriter(p.stdout, logFile)
	cmd.Stderr = logFile
	// The kernel kills the child when the test binary dies (a -timeout, a crash): no
	// server outlives the suite.
	waited, err := tiedproc.Start(cmd)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd, p.started = cmd, time.Now()
	go func() {
		p.waitErr = <-waited
		p.state = cmd.ProcessState
		fmt.Fprintf(logFile, "==== %s: %s exited: %v\n", time.Now().Format(time.RFC3339Nano), name, p.waitErr)
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig, marking the exit that may follow as the test's doing.
func (p *proc) signal(sig syscall.Signal) {
	if sig != syscall.SIGSTOP && sig != syscall.SIGCONT {
		p.expected.Store(true)
	}
	_ = p.cmd.Process.Signal(sig)
}

// kill9 kills the process with SIGKILL and waits until it is gone.
func (p *proc) kill9(t testing.TB) {
	t.Helper()
	p.signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s (pid %d) still runs 30 s after SIGKILL", p.name, p.pid())
	}
}

// waitExit waits up to within for the process to exit and returns its exit code (-1 when
// a signal ended it).
func (p *proc) waitExit(within time.Duration) (code int, err error) {
	select {
	case <-p.exited:
		return p.state.ExitCode(), nil
	case <-time.After(within):
		return 0, fmt.Errorf("%s (pid %d) did not exit within %s", p.name, p.pid(), within)
	}
}

// unexpectedExit describes an exit the test did not cause, or "" while it runs or when
// the test caused it.
func (p *proc) unexpectedExit() string {
	if p.alive() || p.expected.Load() {
		return ""
	}
	return fmt.Sprintf("%s (pid %d) exited on its own: %v", p.name, p.pid(), p.waitErr)
}

// rssKB is the resident set size of the running process, from /proc.
func (p *proc) rssKB() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS line")
}

// procs is the processes of one test: stopped at its end (after checking that none died
// on its own), their log tails printed when it fails.
type procs struct {
	t   testing.TB
	mu  sync.Mutex
	all []*proc
}

func newProcs(t testing.TB) *procs {
	ps := &procs{t: t}
	t.Cleanup(ps.cleanup)
	return ps
}

func (ps *procs) add(p *proc) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.all = append(ps.all, p)
}

// checkAlive fails the test for every process that exited without the test's doing.
func (ps *procs) checkAlive() {
	ps.t.Helper()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		if why := p.unexpectedExit(); why != "" {
			ps.t.Errorf("%s; log tail:\n%s", why, tail(p.logPath, 30))
			p.expected.Store(true) // report once
		}
	}
}

func (ps *procs) cleanup() {
	ps.checkAlive()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		if p.alive() {
			p.signal(syscall.SIGKILL) // frozen (SIGSTOP) ones too
			<-p.exited
		}
	}
	if ps.t.Failed() {
		seen := map[string]bool{}
		for _, p := range ps.all {
			if !seen[p.logPath] {
				seen[p.logPath] = true
				ps.t.Logf("---- %s (tail of %s)\n%s", p.name, p.logPath, tail(p.logPath, 40))
			}
		}
	}
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 400 {
			lines[i] = l[:400] + "..."
		}
	}
	return strings.Join(lines, "\n")
}

// baseEnv is the environment of every subprocess: nothing inherited but PATH, so no LA_*
// variable of the caller's shell leaks in (the worker refuses unknown ones), and a HOME of
// the test's own (no Hugging Face cache).
func baseEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home}
}

// mkdir makes dir (and its parents) or fails the test.
func mkdir(t testing.TB, parts ...string) string {
	t.Helper()
	dir := filepath.Join(parts...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
