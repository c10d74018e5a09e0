package storage_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// openS3 starts a real versitygw with one bucket and opens a Router on it.
func openS3(t testing.TB) (*s3test.Server, *storage.Router) {
	t.Helper()
	srv := s3test.Start(t)
	srv.CreateBucket(t, "images")
	return srv, openRouter(t, storage.Config{
		Endpoint:  srv.Endpoint,
		Region:    s3test.Region,
		AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey,
		Secure:    false,
		PathStyle: "true",
	})
}

// testMaxImageBytes is the worker's LA_MAX_IMAGE_BYTES default, the limit tests run with
// unless they are about the limit.
const testMaxImageBytes = 32 << 20

// openRouter opens cfg, with testMaxImageBytes when it sets no limit.
func openRouter(t testing.TB, cfg storage.Config) *storage.Router {
	t.Helper()
	if cfg.MaxImageBytes == 0 {
		cfg.MaxImageBytes = testMaxImageBytes
	}
	r, err := storage.Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestS3PutGetStat(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	data := readTestImage(t)
	const u = "s3://images/cam04/000123.jpg"

	if err := store.Put(ctx, u, data, "image/jpeg"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	obj, err := store.Stat(ctx, u)
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	want := storage.Object{URL: u, Size: int64(len(data)), ContentType: "image/jpeg"}
	if obj != want {
		t.Fatalf("Stat = %+v, want %+v", obj, want)
	}
	got, err := store.Get(ctx, u, int64(len(data)))
	if err != nil {
		t.Fatalf("Get with a limit of exactly the size: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("Get returned %d bytes that differ from the %d put", len(got), len(data))
	}
}

func TestS3ContentTypeRoundTrips(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	for u, ct := range map[string]string{
		"s3://images/r/1.json": "application/json",
		"s3://images/r/1.png":  "image/png",
		"s3://images/r/blob":   "", // stored as application/octet-stream
	} {
		if err := store.Put(ctx, u, []byte("x"), ct); err != nil {
			t.Fatalf("Put %s: %v", u, err)
		}
		obj, err := store.Stat(ctx, u)
		if err != nil {
			t.Fatalf("Stat %s: %v", u, err)
		}
		want := ct
		if want == "" {
			want = "application/octet-stream"
		}
		if obj.ContentType != want {
			t.Errorf("%s: content type %q, want %q", u, obj.ContentType, want)
		}
	}
}

func TestS3PutReplaces(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	const u = "s3://images/a.txt"
	for _, v := range []string{"first, longer", "second"} {
		if err := store.Put(ctx, u, []byte(v), "text/plain"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.Get(ctx, u, 0)
	if err != nil || string(got) != "second" {
		t.Fatalf("Get = %q, %v; want \"second\"", got, err)
	}
}

func TestS3MissingIsNotFound(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	for _, u := range []string{"s3://images/nope.jpg", "s3://no-such-bucket/a.jpg"} {
		if _, err := store.Stat(ctx, u); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Stat %s: %v, want ErrNotFound", u, err)
		}
		if _, err := store.Get(ctx, u, 0); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Get %s: %v, want ErrNotFound", u, err)
		}
	}
	err := store.List(ctx, "s3://no-such-bucket/", func(storage.Object) bool { return true })
	if !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("List of a missing bucket: %v, want ErrNotFound", err)
	}
}

func TestS3OverLimitByStat(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	const u = "s3://images/big.bin"
	if err := store.Put(ctx, u, make([]byte, 1001), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, u, 1000); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("Get over the limit: %v, want ErrTooLarge", err)
	}
}

// TestS3OverLimitWhileReading puts a proxy in front of the real server that reports a
// 10-byte size for every HEAD and sends GET bodies without a length (chunked), as a
// server that misreports sizes would: the read itself must still refuse the object.
func TestS3OverLimitWhileReading(t *testing.T) {
	srv, direct := openS3(t)
	ctx := context.Background()
	const u = "s3://images/grows.bin"
	if err := direct.Put(ctx, u, make([]byte, 5000), ""); err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		switch resp.Request.Method {
		case http.MethodHead:
			resp.Header.Set("Content-Length", "10")
			resp.ContentLength = 10
		case http.MethodGet:
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	lying := openRouter(t, storage.Config{
		Endpoint:  front.URL, // http://127.0.0.1:port
		Region:    s3test.Region,
		AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey,
		PathStyle: "true",
	})
	obj, err := lying.Stat(ctx, u)
	if err != nil || obj.Size != 10 {
		t.Fatalf("the proxy does not lie: Stat = %+v, %v", obj, err)
	}
	if _, err := lying.Get(ctx, u, 100); !errors.Is(err, storage.ErrTooLarge) {
		t.Fatalf("Get of a 5000-byte object claiming 10 bytes, limit 100: %v, want ErrTooLarge", err)
	}
}

func TestS3ListInKeyOrder(t *testing.T) {
	_, store := openS3(t)
	ctx := context.Background()
	keys := []string{"f/b.jpg", "f/a.jpg", "f/sub/c.jpg", "f-other/d.jpg", "g/e.jpg"}
	for _, k := range keys {
		if err := store.Put(ctx, "s3://images/"+k, []byte(k), "image/jpeg"); err != nil {
			t.Fatal(err)
		}
	}
	list := func(prefix string, limit int) []string {
		t.Helper()
		var got []string
		err := store.List(ctx, prefix, func(o storage.Object) bool {
			if o.Size != int64(len(o.URL)-len("s3://images/")) {
				t.Errorf("%s: size %d", o.URL, o.Size)
			}
			got = append(got, o.URL)
			return len(got) < limit
		})
		if err != nil {
			t.Fatalf("List %s: %v", prefix, err)
		}
		return got
	}
	cases := []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"s3://images/f/", 100, []string{"s3://images/f/a.jpg", "s3://images/f/b.jpg", "s3://images/f/sub/c.jpg"}},
		{"s3://images/f", 100, []string{"s3://images/f-other/d.jpg", "s3://images/f/a.jpg", "s3://images/f/b.jpg", "s3://images/f/sub/c.jpg"}},
		{"s3://images", 2, []string{"s3://images/f-other/d.jpg", "s3://images/f/a.jpg"}},
		{"s3://images/zzz", 100, nil},
	}
	for _, c := range cases {
		if got := list(c.prefix, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("List %s (stop after %d) = %q, want %q", c.prefix, c.limit, got, c.want)
		}
	}
}

// TestS3StoppedThenRestarted: while the service is down, errors are transient (not
// ErrNotFound, so a worker retries instead of dead-lettering); once it is back, the same
// Router works again without being reopened.
func TestS3StoppedThenRestarted(t *testing.T) {
	srv, store := openS3(t)
	ctx := context.Background()
	const u = "s3://images/kept.jpg"
	if err := store.Put(ctx, u, []byte("kept"), "image/jpeg"); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	_, err := store.Get(ctx, u, 0)
	if err == nil {
		t.Fatal("Get succeeded with the server stopped")
	}
	t.Logf("with the server stopped: %v", err)
	for _, permanent := range []error{storage.ErrNotFound, storage.ErrTooLarge, storage.ErrBadURL, storage.ErrNotAllowed} {
		if errors.Is(err, permanent) {
			t.Fatalf("Get with the server stopped: %v; classified as %v, want a transient error", err, permanent)
		}
	}

	srv.Restart()
	got, err := store.Get(ctx, u, 0)
	if err != nil || string(got) != "kept" {
		t.Fatalf("Get after restart = %q, %v", got, err)
	}
}

func TestS3CredentialsFile(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "images")
	dir := t.TempDir()
	files := map[string]string{
		"two-line": srv.AccessKey + "\n" + srv.SecretKey + "\n",
		"aws": "[other]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n" +
			"[default]\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key=" + srv.SecretKey + "\n",
	}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			store := openRouter(t, storage.Config{
				Endpoint: "http://" + srv.Endpoint, CredentialsFile: p, Region: s3test.Region, Secure: true,
			})
			if err := store.Put(context.Background(), "s3://images/"+name, []byte(name), "text/plain"); err != nil {
				t.Fatalf("Put with credentials from the %s file: %v", name, err)
			}
		})
	}
}

func TestS3WrongCredentialsAreNotNotFound(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "images")
	store := openRouter(t, storage.Config{
		Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: "wrong", Region: s3test.Region,
	})
	_, err := store.Get(context.Background(), "s3://images/a.jpg", 0)
	if err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get with a wrong secret: %v, want an access error", err)
	}
}

func readTestImage(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "person.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		t.Fatal("empty test image")
	}
	return data
}
