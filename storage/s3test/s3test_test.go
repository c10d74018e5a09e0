package s3test_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/locateanything/detect/internal/pkitest"
	"github.com/locateanything/detect/storage/s3test"
)

// TestStartStopRestart checks the harness end to end: an object written before a stop is
// unreachable while stopped and readable again after a restart on the same endpoint.
func TestStartStopRestart(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "bucket")
	ctx := context.Background()
	client := srv.Client(t)
	data := []byte("hello")
	if _, err := client.PutObject(ctx, "bucket", "a/b.txt", bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "text/plain"}); err != nil {
		t.Fatalf("put: %v", err)
	}

	srv.Stop()
	if _, err := client.StatObject(ctx, "bucket", "a/b.txt", minio.StatObjectOptions{}); err == nil {
		t.Fatal("stat succeeded against a stopped server")
	}
	endpoint := srv.Endpoint
	srv.Restart()
	if srv.Endpoint != endpoint {
		t.Fatalf("endpoint moved on restart: %s -> %s", endpoint, srv.Endpoint)
	}

	obj, err := client.GetObject(ctx, "bucket", "a/b.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("read after restart: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("got %q, want %q", got, data)
	}
}

// TestWrongCredentialsRefused checks that the server really authenticates: the random root
// keys are what let a client in.
func TestWrongCredentialsRefused(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "bucket")
	bad, err := minio.New(srv.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(srv.AccessKey, "not-the-secret", ""),
		Region: s3test.Region,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.BucketExists(context.Background(), "bucket"); err == nil {
		t.Fatal("a wrong secret key was accepted")
	}
}

// TestHTTPS: with a certificate the server speaks HTTPS only, and the harness's client
// trusts the CA that signed it.
func TestHTTPS(t *testing.T) {
	ca := pkitest.NewCA(t, "la-s3-test")
	pair := ca.Server(t, "s3")
	srv := s3test.StartWith(t, s3test.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile, CAFile: ca.File})
	if !srv.Secure || srv.URL() != "https://"+srv.Endpoint {
		t.Fatalf("Secure %v, URL %s", srv.Secure, srv.URL())
	}
	srv.CreateBucket(t, "bucket")
	plain, err := minio.New(srv.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
		Region:     s3test.Region,
		MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.BucketExists(context.Background(), "bucket"); err == nil {
		t.Fatal("plain HTTP was answered by an HTTPS server")
	}
	srv.Restart() // comes back with its certificate
	if ok, err := srv.Client(t).BucketExists(context.Background(), "bucket"); err != nil || !ok {
		t.Fatalf("after a restart: %v %v", ok, err)
	}
}
