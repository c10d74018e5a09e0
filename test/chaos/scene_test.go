//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/jobs"
)

// scene is one scenario's world: its directory, processes, ledger and NATS client, and
// where its workers read images and store results.
type scene struct {
	t       *testing.T
	dir     string
	ps      *procs
	led     *ledger
	c       *client
	images  string    // a file:// root holding the shape scenes 00.png-09.png
	results string    // the workers' LA_RESULTS_URL
	s3      *s3Server // nil unless the scenario uses S3; then images and results live there
}

func newScene(t *testing.T) *scene {
	t.Helper()
	dir := t.TempDir()
	s := &scene{t: t, dir: dir, ps: newProcs(t), led: &ledger{}, images: mkdir(t, dir, "images")}
	entries, err := os.ReadDir(heldoutPNG)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".png") {
			b, err := os.ReadFile(filepath.Join(heldoutPNG, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.images, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s
}

// useS3 starts versitygw with the scenes in s3://images/ and results going to
// s3://results/.
func (s *scene) useS3() {
	s.t.Helper()
	s.s3 = startS3(s.t, s.ps, s.dir, "images", "results")
	for i := range 10 {
		b, err := os.ReadFile(filepath.Join(s.images, fmt.Sprintf("%02d.png", i)))
		if err != nil {
			s.t.Fatal(err)
		}
		s.s3.put(s.t, "images", fmt.Sprintf("%02d.png", i), b)
	}
	s.results = "s3://results/"
}

// workerEnv is workerEnv for this scene: its images, results and data directory.
func (s *scene) workerEnv(name string) map[string]string {
	env := workerEnv(name, filepath.Join(s.dir, name, "data"))
	env["LA_FILE_ROOTS"] = s.images
	if s.s3 != nil {
		s.s3.workerEnv(env)
		env["LA_RESULTS_URL"] = s.results
	} else {
		// One results folder for every worker of the scene, so the accounting reads one place.
		s.results = "file://" + mkdir(s.t, s.dir, "results") + "/"
		env["LA_RESULTS_URL"] = s.results
		env["LA_OUTPUT_ROOTS"] = filepath.Join(s.dir, "results")
	}
	return env
}

// unset, as a value in the env a scene's worker is given, removes the variable.
const unset = "\x00unset"

// worker prepares a worker of this scene; env changes the scene's configuration.
func (s *scene) worker(name string, env map[string]string) *worker {
	s.t.Helper()
	base := s.workerEnv(name)
	for k, v := range env {
		if v == unset {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	return newWorker(s.t, s.ps, name, filepath.Join(s.dir, name), base)
}

// connect opens the scene's client once a worker has made the topology.
func (s *scene) connect(urls string) {
	s.t.Helper()
	s.c = connect(s.t, urls)
	s.c.waitTopology(s.t)
}

// imageURL is the URL of scene i%10.
func (s *scene) imageURL(i int) string {
	name := fmt.Sprintf("%02d.png", i%10)
	if s.s3 != nil {
		return "s3://images/" + name
	}
	return "file://" + filepath.Join(s.images, name)
}

// publishGood publishes jobs prefix-from .. prefix-(to-1), each of which must succeed.
func (s *scene) publishGood(prefix string, from, to int) error {
	for i := from; i < to; i++ {
		j := jobs.Job{ID: fmt.Sprintf("%s-%05d", prefix, i), Image: s.imageURL(i), Query: "red circle</c>blue square"}
		if err := s.led.submitJob(s.c, j, s.results, succeeded); err != nil {
			return err
		}
	}
	return nil
}

// mustPublishGood is publishGood on the test's goroutine.
func (s *scene) mustPublishGood(prefix string, from, to int) {
	s.t.Helper()
	if err := s.publishGood(prefix, from, to); err != nil {
		s.t.Fatal(err)
	}
}

// resultCount is the number of messages in LA_RESULTS, or -1 while it cannot be read.
func (s *scene) resultCount() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := s.c.js.Stream(ctx, jobs.ResultsStream)
	if err != nil {
		return -1
	}
	return int(st.CachedInfo().State.Msgs)
}

// waitResults waits until LA_RESULTS holds at least n results: the fault lands mid-run.
func (s *scene) waitResults(n int, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for s.resultCount() < n {
		s.ps.checkAlive()
		if s.t.Failed() {
			s.t.FailNow()
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("fewer than %d results within %s (have %d)", n, within, s.resultCount())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// read reads a stored result through file:// or s3://; os.ErrNotExist when it is missing.
func (s *scene) read(ctx context.Context, url string) ([]byte, error) {
	if path, ok := strings.CutPrefix(url, "file://"); ok {
		// Only a regular file: a hostile job may have pointed its output at a FIFO.
		if fi, err := os.Lstat(path); err != nil {
			return nil, err
		} else if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
		}
		return os.ReadFile(path)
	}
	if rest, ok := strings.CutPrefix(url, "s3://"); ok && s.s3 != nil {
		bucket, key, _ := strings.Cut(rest, "/")
		return s.s3.get(ctx, s.s3.client(s.t), bucket, key)
	}
	return nil, fmt.Errorf("%s: not a location this scene reads", url)
}

// account is the accounting of this scene's ledger; it also fails the test for a process
// that died on its own.
func (s *scene) account(within time.Duration) *report {
	s.t.Helper()
	r := account(s.t, s.c, s.led, accountOpts{within: within, read: s.read})
	s.ps.checkAlive()
	return r
}
