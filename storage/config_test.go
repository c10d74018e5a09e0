package storage_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/storage"
)

func TestOpenNeedsAnImageLimit(t *testing.T) {
	if _, err := storage.Open(storage.Config{FileRoots: []string{t.TempDir()}}); err == nil ||
		!strings.Contains(err.Error(), "LA_MAX_IMAGE_BYTES") {
		t.Errorf("Open without MaxImageBytes: %v; want an error naming LA_MAX_IMAGE_BYTES (no default of its own)", err)
	}
}

func TestConfigNeverShowsCredentials(t *testing.T) {
	cfg := storage.Config{Endpoint: "s3.example.com", AccessKey: "AKIAEXAMPLEACCESS", SecretKey: "wJalrEXAMPLESECRET"}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("storage", "config", cfg)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("storage", "config", cfg)
	shown := map[string]string{
		"%v":   fmt.Sprintf("%v", cfg),
		"%+v":  fmt.Sprintf("%+v", cfg),
		"%#v":  fmt.Sprintf("%#v", cfg),
		"%s":   fmt.Sprintf("%s", cfg),
		"slog": logged.String(),
	}
	for how, s := range shown {
		if strings.Contains(s, "AKIAEXAMPLEACCESS") || strings.Contains(s, "wJalrEXAMPLESECRET") {
			t.Errorf("%s shows a credential: %s", how, s)
		}
		if !strings.Contains(s, "s3.example.com") || !strings.Contains(s, "redacted") {
			t.Errorf("%s hides too much or does not mark the redaction: %s", how, s)
		}
	}
}

func TestOpenRejectsBadS3Settings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	threeLines := write("three", "a\nb\nc\n")
	noDefault := write("aws", "[prod]\naws_access_key_id=a\naws_secret_access_key=b\n")
	notPEM := write("ca.pem", "not a certificate")

	cases := map[string]storage.Config{
		"both credential forms": {Endpoint: "h:1", AccessKey: "a", SecretKey: "b", CredentialsFile: threeLines},
		"access key alone":      {Endpoint: "h:1", AccessKey: "a"},
		"three-line file":       {Endpoint: "h:1", CredentialsFile: threeLines},
		"no default profile":    {Endpoint: "h:1", CredentialsFile: noDefault},
		"missing file":          {Endpoint: "h:1", CredentialsFile: filepath.Join(dir, "missing")},
		"path style typo":       {Endpoint: "h:1", PathStyle: "yes please"},
		"endpoint with path":    {Endpoint: "h:1/bucket"},
		"endpoint scheme":       {Endpoint: "ftp://h:1"},
		"CA without TLS":        {Endpoint: "http://h:1", CAFile: notPEM},
		"CA not PEM":            {Endpoint: "https://h:1", CAFile: notPEM},
	}
	for name, cfg := range cases {
		cfg.MaxImageBytes = 1 << 20 // so each case fails for its own reason
		if _, err := storage.Open(cfg); err == nil {
			t.Errorf("%s: Open succeeded", name)
		} else if strings.Contains(err.Error(), "wJalr") {
			t.Errorf("%s: error shows a secret: %v", name, err)
		}
	}
}

func TestCredentialsFileErrorsDoNotQuoteTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(p, []byte("AKIAEXAMPLEACCESS\nwJalrEXAMPLESECRET\nextra\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := storage.Open(storage.Config{Endpoint: "h:1", CredentialsFile: p, MaxImageBytes: 1 << 20})
	if err == nil || strings.Contains(err.Error(), "EXAMPLE") {
		t.Fatalf("Open = %v; want an error that does not quote the file", err)
	}
}
