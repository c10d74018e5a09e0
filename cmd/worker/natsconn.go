package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/locateanything/detect/jobs/natsembed"
)

// connectNATS connects to LA_NATS_URL, or, when it is empty, starts the embedded server
// (store under LA_DATA_DIR/jetstream, listening on LA_NATS_LISTEN) and connects to that.
// embedded is nil when an external server is used; the caller shuts it down after
// closing the connection.
func connectNATS(cfg Config, log *slog.Logger) (nc *nats.Conn, embedded *natsembed.Server, err error) {
	url := cfg.NATSURL
	if url == "" {
		embedded, err = natsembed.Start(natsembed.Options{
			Listen:   cfg.NATSListen,
			StoreDir: filepath.Join(cfg.DataDir, "jetstream"),
			Logger:   log,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%w (set LA_NATS_LISTEN to another address, or LA_NATS_URL to use an existing server)", err)
		}
		url = embedded.ClientURL()
		log.Info("embedded NATS server started", "url", url, "store", filepath.Join(cfg.DataDir, "jetstream"))
	}
	opts, err := natsOptions(cfg, log)
	if err == nil {
		nc, err = nats.Connect(url, opts...)
	}
	if err != nil {
		if embedded != nil {
			embedded.Shutdown()
		}
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, embedded, nil
}

// natsOptions turns LA_NATS_* into client options. A worker rides out NATS restarts by
// reconnecting forever; its Runners retry pulls meanwhile.
func natsOptions(cfg Config, log *slog.Logger) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("la-worker " + cfg.WorkerName),
		nats.Timeout(cfg.NATSTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "url", c.ConnectedUrlRedacted()) }),
	}
	switch {
	case cfg.NATSCreds != "":
		opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
	case cfg.NATSNKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NATSNKeyFile)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_NKEY_FILE: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.NATSUser != "" || cfg.NATSPassword != "" {
		opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
	}
	if cfg.NATSToken != "" {
		opts = append(opts, nats.Token(cfg.NATSToken))
	}
	if cfg.NATSTLSCA != "" || cfg.NATSTLSCert != "" || cfg.NATSTLSKey != "" {
		tc, err := natsTLS(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

func natsTLS(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.NATSTLSCA != "" {
		pem, err := os.ReadFile(cfg.NATSTLSCA)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("LA_NATS_TLS_CA %s: no PEM certificate in the file", cfg.NATSTLSCA)
		}
		tc.RootCAs = pool
	}
	if (cfg.NATSTLSCert == "") != (cfg.NATSTLSKey == "") {
		return nil, errors.New("LA_NATS_TLS_CERT and LA_NATS_TLS_KEY must be set together")
	}
	if cfg.NATSTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.NATSTLSCert, cfg.NATSTLSKey)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_TLS_CERT/LA_NATS_TLS_KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
