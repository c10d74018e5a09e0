package jobs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// codeOf is the failure code err settles a job with, or "" for a retry.
func codeOf(err error) string {
	var je *jobError
	if errors.As(err, &je) {
		return je.code
	}
	if !isTransient(err) {
		return "unclassified"
	}
	return ""
}

// TestStorageErrorsAreClassified feeds classifyFetch and classifyStoreWrite the errors of a
// real Router (files, a FIFO, a real S3 service) and checks the code each gets; "" means
// retried.
func TestStorageErrorsAreClassified(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hostname"), []byte("box"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.jpg"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.jpg"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	srv.CreateBucket(t, "images")
	open := func(access, secret string) *storage.Router {
		st, err := storage.Open(storage.Config{
			Endpoint: srv.Endpoint, Region: s3test.Region, AccessKey: access, SecretKey: secret,
			Secure: false, PathStyle: "true", FileRoots: []string{dir}, MaxImageBytes: 32 << 20,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	store := open(srv.AccessKey, srv.SecretKey)
	anon := open("", "")
	wrong := open(srv.AccessKey, "wrong")
	ctx := context.Background()
	file := func(rel string) string { return "file://" + filepath.Join(dir, rel) }

	fetches := []struct {
		what  string
		store *storage.Router
		url   string
		code  string
	}{
		{"missing file", store, file("nope.jpg"), CodeNotFound},
		{"missing key", store, "s3://images/nope.jpg", CodeNotFound},
		{"missing bucket", store, "s3://no-such-bucket/a.jpg", CodeNotFound},
		{"over the limit", store, file("big.jpg"), engine.CodeImageTooLarge},
		{"a FIFO", store, file("pipe.jpg"), CodeBadURL},
		{"a 5000-character path", store, file(strings.Repeat("d/", 2500) + "x.jpg"), CodeBadURL},
		{"outside the roots", store, "file:///nowhere/a.jpg", CodeBadURL},
		{"unknown scheme", store, "gs://b/a.jpg", CodeBadURL},
		{"bucket name S3 refuses", store, "s3://192.168.1.1/a.jpg", CodeBadURL},
		{"access denied", anon, "s3://images/nope.jpg", CodeBadURL},
		{"wrong secret key", wrong, "s3://images/nope.jpg", ""},
	}
	for _, c := range fetches {
		_, err := c.store.Get(ctx, c.url, 50)
		if got := codeOf(classifyFetch(c.url, err)); got != c.code {
			t.Errorf("fetch, %s: %v; code %q, want %q", c.what, err, got, c.code)
		}
	}

	writes := []struct {
		what  string
		store *storage.Router
		url   string
		code  string
	}{
		{"bucket that does not exist", store, "s3://no-such-bucket/out/r.json", CodeBadURL},
		{"under a regular file", store, file("hostname/x/r.json"), CodeBadURL},
		{"onto a FIFO", store, file("pipe.jpg"), CodeBadURL},
		{"onto a folder", store, "file://" + dir, CodeBadURL},
		{"access denied", anon, "s3://images/r.json", CodeBadURL},
		{"wrong secret key", wrong, "s3://images/r.json", ""},
	}
	for _, c := range writes {
		err := c.store.Put(ctx, c.url, []byte("{}"), "application/json")
		if got := codeOf(classifyStoreWrite(err)); got != c.code {
			t.Errorf("store, %s: %v; code %q, want %q", c.what, err, got, c.code)
		}
	}

	// The service down, cut short by a deadline as the runner's operation timeout does.
	srv.Stop()
	defer srv.Restart()
	octx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := store.Get(octx, "s3://images/a.jpg", 0)
	if got := codeOf(classifyFetch("s3://images/a.jpg", err)); got != "" {
		t.Errorf("fetch with the service down: %v; code %q, want a retry", err, got)
	}
	if got := codeOf(classifyStoreWrite(store.Put(octx, "s3://images/r.json", []byte("{}"), ""))); got != "" {
		t.Errorf("store with the service down: code %q, want a retry", got)
	}
}

// TestUnusableStorageEndsTheJobOnTheFirstDelivery runs jobs whose image or output can never
// work (a FIFO, a path too long, a link out of the roots, a bucket that does not exist,
// a folder under a regular file): each ends failed with bad_url on its first delivery,
// dead-lettered and not redelivered, and nothing blocks. A link with an absolute target
// inside the root works.
func TestUnusableStorageEndsTheJobOnTheFirstDelivery(t *testing.T) {
	e := newTestEnv(t, testTopology())
	dir := t.TempDir()
	img := readTestdata(t, "dog.jpg")
	if err := os.WriteFile(filepath.Join(dir, "dog.jpg"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hostname"), []byte("box"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "dog.jpg"), filepath.Join(dir, "abs-link.jpg")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/share/../../etc/hostname", filepath.Join(dir, "out-link.jpg")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe.jpg")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // lets go of a reader stuck in open(2) if the test fails
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	store, err := storage.Open(storage.Config{
		Endpoint: "http://" + e.s3.Endpoint, Region: s3test.Region,
		AccessKey: e.s3.AccessKey, SecretKey: e.s3.SecretKey, PathStyle: "true", FileRoots: []string{dir},
		MaxImageBytes: 32 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	startRunner(t, e.topo, store, enginetest.New(), e.runnerConfig("w1"))

	file := func(rel string) string { return "file://" + filepath.Join(dir, rel) }
	failing := []Job{
		{ID: "fifo-image", Image: file("pipe.jpg"), Query: "dog"},
		{ID: "long-path", Image: file(strings.Repeat("d/", 2500) + "x.jpg"), Query: "dog"},
		{ID: "link-out", Image: file("out-link.jpg"), Query: "dog"},
		{ID: "missing-bucket", Image: file("dog.jpg"), Query: "dog", Output: "s3://no-such-bucket/out/"},
		{ID: "under-a-file", Image: file("dog.jpg"), Query: "dog", Output: file("hostname/x") + "/"},
		{ID: "overlay-under-a-file", Image: file("dog.jpg"), Query: "dog", Overlay: true, Output: file("hostname/y") + "/"},
	}
	for _, j := range failing {
		e.publishJob(t, j)
	}
	e.publishJob(t, Job{ID: "abs-link", Image: file("abs-link.jpg"), Query: "dog"})

	for _, j := range failing {
		t.Run(j.ID, func(t *testing.T) {
			res := e.publishedResult(t, DefaultBatch, j.ID)
			if res.Status != StatusFailed || res.Error == nil || res.Error.Code != CodeBadURL || res.Attempt != 1 {
				t.Fatalf("status %s error %+v attempt %d; want failed bad_url on the first delivery", res.Status, res.Error, res.Attempt)
			}
			if rec := e.dlqRecord(t, j.ID); rec == nil || rec.Code != CodeBadURL {
				t.Errorf("DLQ record %+v; want bad_url", rec)
			}
		})
	}
	if res := e.publishedResult(t, DefaultBatch, "abs-link"); res.Status != StatusSucceeded {
		t.Errorf("a link with an absolute target inside the root: %s %+v", res.Status, res.Error)
	}
	testwait.Until(t, 30*time.Second, "every job to be settled", func() bool { return e.queueDrained(t) })
	info, err := e.topo.Consumer.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 {
		t.Errorf("%d messages were redelivered; want none", info.NumRedelivered)
	}
}
