// Package natsconn connects to NATS the way every LocateAnything process does, from the
// LA_NATS_* variables: server URLs, credentials, TLS, and reconnecting forever so a
// process rides out a NATS restart.
package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Config says how to reach NATS (the worker and submit fill it from LA_NATS_*, package
// config). URL may be empty only where the caller supplies one (the embedded server).
type Config struct {
	URL      string // comma-separated server URLs
	Creds    string // a .creds file (JWT + NKey seed)
	NKeyFile string // an NKey seed file
	User     string
	Password string
	Token    string
	TLSCA    string // PEM bundle trusted for the servers
	TLSCert  string // client certificate (mutual TLS)
	TLSKey   string
	Timeout  time.Duration // connect timeout
}

// Options turns the configuration into nats.go options: the client name, the timeout,
// authentication, TLS, and unlimited reconnects (logged to log when it is not nil).
func (c Config) Options(name string, log *slog.Logger) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(c.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
	}
	if log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					log.Warn("disconnected from NATS", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected to NATS", "url", nc.ConnectedUrlRedacted()) }))
	}
	switch {
	case c.Creds != "":
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_NKEY_FILE: %w", err)
		}
		opts = append(opts, o)
	}
	if c.User != "" || c.Password != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.TLSCA != "" || c.TLSCert != "" || c.TLSKey != "" {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("LA_NATS_TLS_CA %s: no PEM certificate in the file", c.TLSCA)
		}
		tc.RootCAs = pool
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("LA_NATS_TLS_CERT and LA_NATS_TLS_KEY must be set together")
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_TLS_CERT/LA_NATS_TLS_KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Connect connects to url (c.URL when empty) with c's options.
func (c Config) Connect(url, name string, log *slog.Logger) (*nats.Conn, error) {
	if url == "" {
		url = c.URL
	}
	opts, err := c.Options(name, log)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

// RedactURL hides passwords in nats://user:pass@host URLs (each of a comma-separated list).
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		scheme, rest, ok := strings.Cut(u, "://")
		if !ok {
			continue
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
				parts[i] = scheme + "://" + user + ":[redacted]" + rest[at:]
			}
		}
	}
	return strings.Join(parts, ",")
}
