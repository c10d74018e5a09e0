package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locateanything/detect/internal/pkitest"
)

// TestCertPool: a CA file's certificates verify what the CA signed, added to the base
// pool when one is given; a missing file and a file without PEM are errors naming it.
func TestCertPool(t *testing.T) {
	ca := pkitest.NewCA(t, "test CA")
	server := ca.Server(t, "server")
	pair, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []*x509.CertPool{nil, x509.NewCertPool()} {
		pool, err := CertPool(ca.File, base)
		if err != nil {
			t.Fatal(err)
		}
		if base != nil && pool != base {
			t.Error("the certificates were not added to the base pool")
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"}); err != nil {
			t.Errorf("the CA's certificate does not verify against the pool: %v", err)
		}
	}
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{notPEM: "no PEM certificate", notPEM + ".absent": "no such file"} {
		if _, err := CertPool(file, nil); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
			t.Errorf("CertPool(%s): %v, want an error naming the file and %q", file, err, want)
		}
	}
}
