package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// Distinctive values for every secret the worker reads.
var secrets = map[string]string{
	"LA_NATS_PASSWORD": "pw-NATS-Secret-Q7x2",
	"LA_NATS_TOKEN":    "tok-NATS-Secret-K9m4",
	"LA_S3_ACCESS_KEY": "AKIA-S3-Secret-Z3v8",
	"LA_S3_SECRET_KEY": "sk-S3-Secret-W5n1",
	"HF_TOKEN":         "hf_HF-Secret-J2p6",
}

// setSecrets sets every secret, and the user that goes with the NATS password.
func setSecrets(t *testing.T) {
	t.Helper()
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("LA_NATS_USER", "la")
}

func checkNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for name, v := range secrets {
		if i := strings.Index(text, v); i >= 0 {
			t.Errorf("%s shows %s: ...%s...", what, name, text[max(0, i-120):min(len(text), i+40)])
		}
	}
}

// TestWorkerConfigHidesEverySecret: `worker config` lists each secret as set, never its value.
func TestWorkerConfigHidesEverySecret(t *testing.T) {
	t.Setenv("LA_DATA_DIR", t.TempDir())
	t.Setenv("LA_NATS_URL", "nats://n1:4222") // user, password and token together are an external server's business
	setSecrets(t)
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"config"}, &stdout, &stderr); code != 0 {
		t.Fatalf("worker config: exit %d, stderr %q", code, stderr.String())
	}
	checkNoSecret(t, "worker config", stdout.String()+stderr.String())
	for name := range secrets {
		if !strings.Contains(stdout.String(), name) {
			t.Errorf("worker config does not list %s", name)
		}
	}
	if n := strings.Count(stdout.String(), "[redacted]"); n != len(secrets) {
		t.Errorf("worker config shows %d redacted values, want %d:\n%s", n, len(secrets), stdout.String())
	}
}

// TestRefusedWorkerSaysNoSecret: a worker whose NATS credentials the server refuses exits 1
// with an error naming the variables to check, in JSON and in text logs alike, and no
// secret anywhere in what it wrote.
func TestRefusedWorkerSaysNoSecret(t *testing.T) {
	srv := natstest.StartWith(t, natsembed.Options{Token: "tok-the-servers-own"})
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			t.Setenv("LA_DATA_DIR", t.TempDir())
			t.Setenv("HF_HOME", t.TempDir())
			t.Setenv("LA_WEIGHTS_DIR", tinyModel(t)) // an engine that opens, so start-up reaches NATS
			t.Setenv("LA_NATS_URL", srv.ClientURL())
			t.Setenv("LA_S3_ENDPOINT", "127.0.0.1:1")
			t.Setenv("LA_METRICS_ADDR", "off")
			t.Setenv("LA_HTTP_ADDR", "127.0.0.1:0")
			t.Setenv("LA_LOG_FORMAT", format)
			t.Setenv("LA_LOG_LEVEL", "debug")
			setSecrets(t)
			var stdout, stderr bytes.Buffer
			code := realMain(nil, &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), "check LA_NATS_USER and LA_NATS_PASSWORD, LA_NATS_TOKEN") {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and the NATS variables to check", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), "Application startup failed") {
				t.Errorf("stdout %q lacks the launcher's failure landmark", stdout.String())
			}
			checkNoSecret(t, format+" logs", stdout.String()+stderr.String())
		})
	}
}

// tinyModel is the small trained checkpoint in the repository.
func tinyModel(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../models/tiny-shapes")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
