package storage_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// wantPermanent checks that err is a permanent failure wrapping sentinel.
func wantPermanent(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded; want a permanent failure (%v)", what, sentinel)
		return
	}
	if !storage.Permanent(err) || !errors.Is(err, sentinel) {
		t.Errorf("%s: %v; want a permanent failure wrapping %q", what, err, sentinel)
	}
}

func wantTransient(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded; want a transient failure", what)
		return
	}
	if storage.Permanent(err) {
		t.Errorf("%s: %v; classified permanent, want transient", what, err)
	}
}

func TestS3ErrorsThatNeverGoAwayArePermanent(t *testing.T) {
	srv, store := openS3(t)
	ctx := context.Background()
	if err := store.Put(ctx, "s3://images/private.jpg", []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
	err := store.Put(ctx, "s3://no-such-bucket/out/r.json", []byte("{}"), "application/json")
	wantPermanent(t, "Put into a bucket that does not exist", err, storage.ErrNotFound)
	if !strings.Contains(fmt.Sprint(err), "NoSuchBucket") {
		t.Errorf("Put into a missing bucket: %v; want the service's code in the message", err)
	}
	for _, u := range []string{
		"s3://192.168.1.1/a.jpg",                           // S3 refuses bucket names shaped like IP addresses
		"s3://ab.-cd/a.jpg",                                // and ".-"
		"s3://images/ ",                                    // the client refuses a key of white space alone
		"s3://images/" + strings.Repeat("k", 1025),         // over S3's key limit
		"s3://images/" + strings.Repeat("d/", 600) + "k",   // likewise
		"s3://images/" + strings.Repeat("n", 300) + ".jpg", // a key the service cannot store
		"s3://images/./a.jpg",                              // the posix backend's "folder" itself
		"s3://images/" + strings.Repeat("../", 3) + "etc/passwd",
		"s3://images/private.jpg/under-an-object.jpg", // an object cannot be a folder there
	} {
		err := store.Put(ctx, u, []byte("x"), "")
		if err == nil {
			// A service may well accept some of these; then it must read them back too.
			if _, gerr := store.Get(ctx, u, 0); gerr != nil {
				t.Errorf("Put %s succeeded but Get failed: %v", trim(u), gerr)
			}
			continue
		}
		if !storage.Permanent(err) {
			t.Errorf("Put %s: %v; want a permanent failure", trim(u), err)
		}
		if _, err := store.Get(ctx, u, 0); err == nil || !storage.Permanent(err) {
			t.Errorf("Get %s: %v; want a permanent failure", trim(u), err)
		}
	}

	// Anonymous requests to a private bucket are refused: access denied, for good.
	anon := openRouter(t, storage.Config{Endpoint: srv.Endpoint, Region: s3test.Region, Secure: false, PathStyle: "true"})
	_, err = anon.Get(ctx, "s3://images/private.jpg", 0)
	wantPermanent(t, "anonymous Get from a private bucket", err, storage.ErrAccessDenied)
	err = anon.Put(ctx, "s3://images/anon.jpg", []byte("x"), "")
	wantPermanent(t, "anonymous Put into a private bucket", err, storage.ErrAccessDenied)

	// Wrong credentials are the worker's problem, not the job's: fixing them and
	// retrying works, so they are transient.
	wrong := openRouter(t, storage.Config{
		Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: "wrong", Region: s3test.Region, PathStyle: "true",
	})
	_, err = wrong.Get(ctx, "s3://images/private.jpg", 0)
	wantTransient(t, "Get with a wrong secret key", err)
	wantTransient(t, "Put with a wrong secret key", wrong.Put(ctx, "s3://images/w.jpg", []byte("x"), ""))
	unknown := openRouter(t, storage.Config{
		Endpoint: srv.Endpoint, AccessKey: "nobody", SecretKey: "wrong", Region: s3test.Region, PathStyle: "true",
	})
	_, err = unknown.Get(ctx, "s3://images/private.jpg", 0)
	wantTransient(t, "Get with an unknown access key", err)
}

// TestS3ServiceTroubleIsTransient: 5xx answers, SlowDown and timeouts are worth retrying.
// A proxy in front of the real service answers every request itself.
func TestS3ServiceTroubleIsTransient(t *testing.T) {
	srv, direct := openS3(t)
	ctx := context.Background()
	if err := direct.Put(ctx, "s3://images/a.jpg", []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
	answers := map[string]func(w http.ResponseWriter){
		"SlowDown": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
		},
		"InternalError": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>`)
		},
		"502 without a body": func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) },
	}
	t.Run("answers", func(t *testing.T) {
		for name, answer := range answers {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { answer(w) }))
				defer front.Close()
				store := openRouter(t, storage.Config{
					Endpoint: front.URL, Region: s3test.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: "true",
				})
				// minio-go retries these itself (about 10 tries in a few seconds) before
				// it returns the last answer; the deadline only bounds a hang.
				octx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				_, err := store.Get(octx, "s3://images/a.jpg", 0)
				wantTransient(t, "Get", err)
				if code, _, _ := strings.Cut(name, " "); !strings.Contains(fmt.Sprint(err), code) {
					t.Errorf("Get: %v; want the service's answer (%s) in the message", err, code)
				}
				wantTransient(t, "Put", store.Put(octx, "s3://images/b.jpg", []byte("x"), ""))
			})
		}
	})
	// A service that is not there at all.
	srv.Stop()
	defer srv.Restart()
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := direct.Get(octx, "s3://images/a.jpg", 0)
	wantTransient(t, "Get with the service down", err)
}

// trim shortens a long URL for a message.
func trim(u string) string {
	if len(u) > 60 {
		return u[:60] + "..."
	}
	return u
}
