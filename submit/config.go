package submit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"

	"github.com/locateanything/detect/storage"
)

// Config is the environment of the CLI: the same LA_NATS_* and LA_S3_* / LA_FILE_ROOTS
// variables a worker reads, plus LA_SUBMIT_* for this tool.
type Config struct {
	NATS    NATSConfig
	Storage storage.Config
	// UploadPrefix is where local images are uploaded (--upload overrides it).
	UploadPrefix string `envconfig:"LA_SUBMIT_UPLOAD"`
}

// NATSConfig says how to reach NATS. The tags carry the full variable names.
type NATSConfig struct {
	URL      string        `envconfig:"LA_NATS_URL" default:"nats://127.0.0.1:4222"`
	Creds    string        `envconfig:"LA_NATS_CREDS"`     // a .creds file (JWT + NKey seed)
	NKeyFile string        `envconfig:"LA_NATS_NKEY_FILE"` // an NKey seed file
	User     string        `envconfig:"LA_NATS_USER"`
	Password string        `envconfig:"LA_NATS_PASSWORD"`
	Token    string        `envconfig:"LA_NATS_TOKEN"`
	TLSCA    string        `envconfig:"LA_NATS_TLS_CA"`   // PEM bundle trusted for the server
	TLSCert  string        `envconfig:"LA_NATS_TLS_CERT"` // client certificate (mutual TLS)
	TLSKey   string        `envconfig:"LA_NATS_TLS_KEY"`
	Timeout  time.Duration `envconfig:"LA_NATS_TIMEOUT" default:"10s"` // connect and request timeout
}

// LoadConfig reads the configuration from the environment.
func LoadConfig() (Config, error) {
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// options turns the configuration into nats.go options. Disconnects are ridden out by
// reconnecting forever: a run must survive a NATS restart.
func (c NATSConfig) options() ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("la-submit"),
		nats.Timeout(c.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
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
	if c.TLSCA != "" || c.TLSCert != "" {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

func (c NATSConfig) tlsConfig() (*tls.Config, error) {
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

// Connect connects to NATS.
func (c NATSConfig) Connect() (*nats.Conn, error) {
	opts, err := c.options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (is a worker or NATS server running? set LA_NATS_URL)", redactURL(c.URL), err)
	}
	return nc, nil
}

// redactURL hides a password in nats://user:pass@host URLs.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			return scheme + "://" + user + ":[redacted]" + rest[at:]
		}
	}
	return u
}
