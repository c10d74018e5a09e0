package storage_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/pkitest"
	"github.com/locateanything/detect/storage"
	"github.com/locateanything/detect/storage/s3test"
)

// TestS3OverTLSWithAPrivateCA: an S3 service whose certificate a private CA signs is
// reached with LA_S3_CA_FILE (read from the environment as the worker and submit read
// it); without it, or with another CA, every request fails with the TLS error, and quotes
// neither key.
func TestS3OverTLSWithAPrivateCA(t *testing.T) {
	ca, other := pkitest.NewCA(t, "la-s3-ca"), pkitest.NewCA(t, "someone-else")
	pair := ca.Server(t, "s3")
	srv := s3test.StartWith(t, s3test.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile, CAFile: ca.File})
	srv.CreateBucket(t, "images")

	load := func(vars map[string]string) storage.Config {
		t.Helper()
		for k, v := range map[string]string{
			"LA_S3_ENDPOINT": srv.Endpoint, "LA_S3_ACCESS_KEY": srv.AccessKey, "LA_S3_SECRET_KEY": srv.SecretKey,
			"LA_S3_PATH_STYLE": "true", "LA_S3_SECURE": "true", "LA_S3_CA_FILE": "",
		} {
			t.Setenv(k, v)
		}
		for k, v := range vars {
			t.Setenv(k, v)
		}
		var s config.Submit
		if err := envconfig.Process("", &s); err != nil {
			t.Fatal(err)
		}
		return s.Storage
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, vars := range []map[string]string{
		{"LA_S3_CA_FILE": ca.File},
		{"LA_S3_CA_FILE": ca.File, "LA_S3_ENDPOINT": "https://" + srv.Endpoint, "LA_S3_SECURE": "false"},
		{"LA_S3_CA_FILE": ca.File, "LA_S3_ENDPOINT": strings.Replace(srv.Endpoint, "127.0.0.1", "localhost", 1)},
	} {
		store := openRouter(t, load(vars))
		url := "s3://images/tls/" + strings.ReplaceAll(vars["LA_S3_ENDPOINT"], "/", "_") + ".txt"
		if err := store.Put(ctx, url, []byte("over TLS"), "text/plain"); err != nil {
			t.Fatalf("%v: put: %v", vars, err)
		}
		got, err := store.Get(ctx, url, 0)
		if err != nil || !bytes.Equal(got, []byte("over TLS")) {
			t.Fatalf("%v: get: %q %v", vars, got, err)
		}
	}

	for what, vars := range map[string]map[string]string{
		"no LA_S3_CA_FILE":  nil,
		"another CA's file": {"LA_S3_CA_FILE": other.File},
	} {
		store := openRouter(t, load(vars))
		start := time.Now()
		_, err := store.Get(ctx, "s3://images/tls/x.txt", 0)
		var unknown x509.UnknownAuthorityError
		if err == nil || !errors.As(err, &unknown) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Errorf("%s: %v; want the TLS error (certificate signed by unknown authority)", what, err)
		}
		t.Logf("%s: %v (after %s)", what, err, time.Since(start).Round(time.Millisecond))
		if err != nil && (strings.Contains(err.Error(), srv.SecretKey) || strings.Contains(err.Error(), srv.AccessKey)) {
			t.Errorf("%s: the error quotes a key: %v", what, err)
		}
	}

	// TLS off with a CA file is a contradiction, refused when the store opens.
	cfg := load(map[string]string{"LA_S3_CA_FILE": ca.File, "LA_S3_SECURE": "false"})
	cfg.MaxImageBytes = 1 << 20
	if _, err := storage.Open(cfg); err == nil || !strings.Contains(err.Error(), "LA_S3_CA_FILE") {
		t.Errorf("LA_S3_CA_FILE with LA_S3_SECURE=false: %v; want a refusal naming LA_S3_CA_FILE", err)
	}
}
