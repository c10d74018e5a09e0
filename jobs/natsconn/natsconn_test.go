package natsconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/jobs/natsembed"
)

func TestConnectReachesAServer(t *testing.T) {
	s, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := Config{URL: s.ClientURL()}.Connect("", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		t.Error("not connected")
	}
}

func TestBadSettingsNameTheVariable(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{TLSCA: filepath.Join(dir, "missing.pem")}, "LA_NATS_TLS_CA"},
		{Config{TLSCA: notPEM}, "no PEM certificate"},
		{Config{TLSCert: notPEM}, "must be set together"},
		{Config{NKeyFile: filepath.Join(dir, "missing.nk")}, "LA_NATS_NKEY_FILE"},
	} {
		if _, err := c.cfg.Options("test", nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.cfg, err, c.want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	got := RedactURL("nats://app:s3cret@n1:4222,nats://n2:4222,tls://u:p@n3,nats://t0ken@n4")
	if strings.Contains(got, "s3cret") || strings.Contains(got, ":p@") || !strings.Contains(got, "nats://app:[redacted]@n1:4222") || !strings.Contains(got, "nats://n2:4222") {
		t.Errorf("RedactURL = %q", got)
	}
	// nats.go takes a user without a password as a token: all of it is the secret.
	if strings.Contains(got, "t0ken") || !strings.Contains(got, "nats://[redacted]@n4") {
		t.Errorf("RedactURL = %q; want the token hidden", got)
	}
}

func must(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
