package jobs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/storage"
)

// unwritable makes dir refuse new files (EACCES for a user, EPERM for root through the
// immutable attribute) until the returned function is called; the test is skipped where
// neither can be done.
func unwritable(t *testing.T, dir string) (restore func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		restore = func() { _ = os.Chmod(dir, 0o755) }
	} else {
		if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot make %s unwritable as root (chattr +i: %v: %s)", dir, err, out)
		}
		restore = func() { _ = exec.Command("chattr", "-i", dir).Run() }
	}
	t.Cleanup(restore)
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, nil, 0o644); err == nil {
		_ = os.Remove(probe)
		restore()
		t.Skipf("%s is still writable", dir)
	}
	return restore
}

// TestUnwritableDefaultOutputIsRetried: the worker's default results folder refusing
// writes for a while (EACCES, EPERM) is the worker's trouble, not the job's: the job is
// retried, not failed for good, and succeeds once the folder is writable again, with no
// dead-letter record.
func TestUnwritableDefaultOutputIsRetried(t *testing.T) {
	f := newFileEnv(t)
	restore := unwritable(t, f.results)
	cfg := f.runnerConfig("w1")
	cfg.RetryDelay, cfg.RetryDelayMax = 300*time.Millisecond, 300*time.Millisecond
	startRunner(t, f.topo, f.store, enginetest.New(), cfg)

	f.publishJob(t, Job{ID: "eperm-1", Image: f.image, Query: "dog", Overlay: true})
	testwait.Until(t, 30*time.Second, "a retry of eperm-1", func() bool {
		st, ok, err := f.topo.State.Get(t.Context(), "eperm-1")
		if err != nil {
			t.Fatal(err)
		}
		if ok && st.Status.Terminal() {
			t.Fatalf("eperm-1 ended (%s, %s) while its default output was unwritable; want a retry", st.Status, st.Error)
		}
		return ok && st.Status == StatusQueued && st.LastError != ""
	})
	restore()
	res := f.publishedResult(t, DefaultBatch, "eperm-1")
	if res.Status != StatusSucceeded || res.Attempt < 2 || res.ResultURL != ResultURL(f.output(), "eperm-1") {
		t.Fatalf("status %s error %+v attempt %d result_url %q; want success on a later delivery", res.Status, res.Error, res.Attempt, res.ResultURL)
	}
	if rec := f.dlqRecord(t, "eperm-1"); rec != nil {
		t.Errorf("dead-letter record %+v; want none", rec)
	}
}

// TestDefaultOutputRefusalDoesNotBlameTheJob: when the worker's default output refuses a
// result for good (here a folder in the result's place), the failure says so, and does
// not blame a field output that the job never set.
func TestDefaultOutputRefusalDoesNotBlameTheJob(t *testing.T) {
	f := newFileEnv(t)
	if err := os.Mkdir(filepath.Join(f.results, "taken.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	startRunner(t, f.topo, f.store, enginetest.New(), f.runnerConfig("w1"))
	f.publishJob(t, Job{ID: "taken", Image: f.image, Query: "dog"})
	res := f.publishedResult(t, DefaultBatch, "taken")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeBadURL {
		t.Fatalf("status %s error %+v; want failed bad_url", res.Status, res.Error)
	}
	if strings.Contains(res.Error.Message, "field output") || !strings.Contains(res.Error.Message, "default output") {
		t.Errorf("message %q; want it to name the worker's default output, not a field of the job", res.Error.Message)
	}
	if rec := f.dlqRecord(t, "taken"); rec == nil || rec.Code != CodeBadURL {
		t.Errorf("dead-letter record %+v; want bad_url", rec)
	}
}

// swapAfterOverlay is the file store with one hostile neighbour: right after an overlay
// is stored, it puts a link to a file outside the roots where the job's result goes, as a
// local user with write access to the output folder could mid-job.
type swapAfterOverlay struct {
	*storage.Router
	swap func(overlayURL string)
}

func (s swapAfterOverlay) Put(ctx context.Context, url string, data []byte, contentType string) error {
	err := s.Router.Put(ctx, url, data, contentType)
	if err == nil && strings.HasSuffix(url, ".png") {
		s.swap(url)
	}
	return err
}

// TestNoOrphanOverlayWhenTheResultIsRefused: a link swapped under the job's output folder
// between the overlay and the result makes the result's place refuse it; the result is
// then stored under the default output as a bad_url failure naming no overlay, and the
// overlay already stored is removed rather than left behind with no result pointing to it.
func TestNoOrphanOverlayWhenTheResultIsRefused(t *testing.T) {
	f := newFileEnv(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "elsewhere.json"), []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	jobOut := filepath.Join(f.root, "jobout")
	store := swapAfterOverlay{Router: f.store, swap: func(overlayURL string) {
		result := strings.TrimSuffix(strings.TrimPrefix(overlayURL, "file://"), ".png") + ".json"
		if err := os.Symlink(filepath.Join(outside, "elsewhere.json"), result); err != nil {
			t.Errorf("swap: %v", err)
		}
	}}
	startRunner(t, f.topo, store, enginetest.New(), f.runnerConfig("w1"))
	f.publishJob(t, Job{ID: "orphan-1", Image: f.image, Query: "dog", Overlay: true, Output: "file://" + jobOut + "/"})

	res := f.publishedResult(t, DefaultBatch, "orphan-1")
	if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeBadURL || res.OverlayURL != nil {
		t.Fatalf("status %s error %+v overlay %v; want failed bad_url without an overlay", res.Status, res.Error, res.OverlayURL)
	}
	if res.ResultURL != ResultURL(f.output(), "orphan-1") {
		t.Errorf("result_url %q; want the default output's", res.ResultURL)
	}
	if _, err := os.Lstat(filepath.Join(jobOut, "orphan-1.png")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the overlay was left behind (%v)", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "elsewhere.json")); err != nil || string(b) != "not yours" {
		t.Errorf("the file outside the roots: %q, %v; want it untouched", b, err)
	}
}
