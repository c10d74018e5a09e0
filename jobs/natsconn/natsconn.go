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

	"github.com/locateanything/detect/internal/settings"
	"github.com/locateanything/detect/internal/tlsfiles"
)

// Config says how to reach NATS. The settings are declared here (the tags: variable,
// default, meaning; package config reads them from the environment, and Validate is the
// one check of them). URL may be empty only where the caller supplies one (the embedded
// server).
type Config struct {
	URL      string        `envconfig:"LA_NATS_URL" secret:"url" desc:"comma-separated NATS server URLs; empty = the worker's embedded server"`
	Creds    string        `envconfig:"LA_NATS_CREDS" desc:"a .creds file (JWT and NKey seed) for an external server"`
	NKeyFile string        `envconfig:"LA_NATS_NKEY_FILE" desc:"an NKey seed file for an external server"`
	User     string        `envconfig:"LA_NATS_USER" desc:"user name presented to NATS (the embedded server's producers' user)"`
	Password string        `envconfig:"LA_NATS_PASSWORD" secret:"true" desc:"password of LA_NATS_USER"`
	Token    string        `envconfig:"LA_NATS_TOKEN" secret:"true" desc:"token presented to NATS, instead of a user and password"`
	TLSCA    string        `envconfig:"LA_NATS_TLS_CA" desc:"PEM bundle trusted for the servers (embedded: the CA client certificates must be signed by)"`
	TLSCert  string        `envconfig:"LA_NATS_TLS_CERT" desc:"certificate: the client's (mutual TLS), or the embedded server's own"`
	TLSKey   string        `envconfig:"LA_NATS_TLS_KEY" desc:"private key of LA_NATS_TLS_CERT"`
	Timeout  time.Duration `envconfig:"LA_NATS_TIMEOUT" default:"10s" desc:"connect timeout"`
	// InboxPrefix, when set, replaces _INBOX as the prefix of the connection's reply
	// subjects (the worker's, so that producers cannot subscribe to them).
	InboxPrefix string `ignored:"true"`
}

// Validate reports every setting that makes no sense whichever server is reached, each
// naming its variable.
func (c Config) Validate() error {
	var v settings.Check
	v.PositiveDuration("LA_NATS_TIMEOUT", c.Timeout)
	if c.Password != "" && c.User == "" {
		v.Add("LA_NATS_PASSWORD is set without LA_NATS_USER")
	}
	if c.Creds != "" && c.NKeyFile != "" {
		v.Add("LA_NATS_CREDS and LA_NATS_NKEY_FILE are both set; a .creds file holds its own NKey, set one")
	}
	return v.Err()
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
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					log.Warn("disconnected from NATS", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected to NATS", "url", RedactURL(nc.ConnectedUrl())) }))
	}
	switch {
	case c.Creds != "":
		// nats.go reads the file only while connecting, and its errors do not say which
		// setting named it: read it once here.
		if _, err := os.ReadFile(c.Creds); err != nil {
			return nil, fmt.Errorf("LA_NATS_CREDS: %w", err)
		}
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
		pool, err := tlsfiles.CertPool(c.TLSCA, nil)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_TLS_CA: %w", err)
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

// Connect connects to url (c.URL when empty) with c's options. A failure says which
// LA_NATS_* setting to check, and never quotes a secret.
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
		return nil, c.connectError(RedactURL(url), err)
	}
	return nc, nil
}

// ConnectInProcess connects to a server running in this process (the worker's embedded
// one) without the network: with c's credentials, but no TLS, which would protect nothing.
func (c Config) ConnectInProcess(server nats.InProcessConnProvider, name string, log *slog.Logger) (*nats.Conn, error) {
	c.TLSCA, c.TLSCert, c.TLSKey = "", "", ""
	opts, err := c.Options(name, log)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect("", append(opts, nats.InProcessServer(server))...)
	if err != nil {
		return nil, c.connectError("the embedded server", err)
	}
	return nc, nil
}

// connectError wraps a failed connection with what to check.
func (c Config) connectError(where string, err error) error {
	if hint := c.hint(where, err); hint != "" {
		return fmt.Errorf("connect to NATS at %s: %w (%s)", where, err, hint)
	}
	return fmt.Errorf("connect to NATS at %s: %w", where, err)
}

// hint names the settings behind a refused connection to url (redacted): authentication,
// or TLS.
func (c Config) hint(url string, err error) string {
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	switch {
	case errors.Is(err, nats.ErrAuthorization):
		if set := c.authSettings(url); set != "" {
			return "the server refused the credentials: check " + set
		}
		return "the server requires authentication: set LA_NATS_CREDS, LA_NATS_NKEY_FILE, " +
			"LA_NATS_USER and LA_NATS_PASSWORD, or LA_NATS_TOKEN"
	case errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return "the credentials have expired or were revoked: renew the file LA_NATS_CREDS names"
	case errors.As(err, &unknownCA), errors.As(err, &invalid):
		if c.TLSCA == "" {
			return "the server's TLS certificate is not signed by a CA this machine trusts: " +
				"set LA_NATS_TLS_CA to the PEM file of the CA that signs it"
		}
		return "the server's TLS certificate is not signed by the CA in LA_NATS_TLS_CA, " +
			"or is not valid now: check LA_NATS_TLS_CA"
	case errors.As(err, &host):
		return "the server's TLS certificate does not name the host in LA_NATS_URL: " +
			"connect by a name or address the certificate lists"
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "the server does not offer TLS: check LA_NATS_URL, " +
			"or unset LA_NATS_TLS_CA, LA_NATS_TLS_CERT and LA_NATS_TLS_KEY"
	case errors.Is(err, nats.ErrTLS), strings.Contains(err.Error(), "remote error: tls"):
		// The handshake completed on our side and the server hung up or sent an alert:
		// what it refused is the client certificate, or its absence.
		if c.TLSCert == "" {
			if strings.Contains(err.Error(), "certificate required") {
				return "the server requires a client certificate (mutual TLS): set LA_NATS_TLS_CERT and LA_NATS_TLS_KEY"
			}
			return "TLS failed; if the server requires client certificates (mutual TLS), " +
				"set LA_NATS_TLS_CERT and LA_NATS_TLS_KEY"
		}
		return "TLS failed: check that LA_NATS_TLS_CERT (with LA_NATS_TLS_KEY) is signed " +
			"by a CA the server trusts for clients, and LA_NATS_TLS_CA"
	}
	return ""
}

// authSettings names the authentication settings in use, for a refusal.
func (c Config) authSettings(url string) string {
	var set []string
	if strings.Contains(url, "@") {
		set = append(set, "the credentials in LA_NATS_URL")
	}
	switch {
	case c.Creds != "":
		set = append(set, "LA_NATS_CREDS")
	case c.NKeyFile != "":
		set = append(set, "LA_NATS_NKEY_FILE")
	}
	if c.User != "" || c.Password != "" {
		set = append(set, "LA_NATS_USER and LA_NATS_PASSWORD")
	}
	if c.Token != "" {
		set = append(set, "LA_NATS_TOKEN")
	}
	return strings.Join(set, ", ")
}

// RedactURL hides the credentials in nats://user:pass@host and nats://token@host URLs
// (each of a comma-separated list): the password, or the whole token.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		scheme, rest, ok := strings.Cut(u, "://")
		if !ok {
			continue
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			parts[i] = scheme + "://" + user + ":[redacted]" + rest[at:]
		} else {
			parts[i] = scheme + "://[redacted]" + rest[at:] // nats.go takes a lone user as a token
		}
	}
	return strings.Join(parts, ",")
}
