// Package tlsfiles reads the PEM files the TLS settings name. The NATS client
// (jobs/natsconn), the embedded NATS server (worker) and the S3 client (storage) each trust
// a CA file of the operator's; the callers name their variable in the errors.
package tlsfiles

import (
	"crypto/x509"
	"fmt"
	"os"
)

// CertPool adds the PEM certificates in file to base (a new, empty pool when base is nil)
// and returns it. A file with no PEM certificate is an error, not an empty trust.
func CertPool(file string, base *x509.CertPool) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := base
	if pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in the file", file)
	}
	return pool, nil
}
