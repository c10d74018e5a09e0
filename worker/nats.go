package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/tlsfiles"
	"github.com/locateanything/detect/jobs/natsembed"
)

// connectNATS connects to LA_NATS_URL, or, when it is empty, starts the embedded server
// (store under LA_DATA_DIR/jetstream, listening on LA_NATS_LISTEN, authenticating clients
// by LA_NATS_USER and LA_NATS_PASSWORD or LA_NATS_TOKEN, TLS with LA_NATS_TLS_CERT and
// LA_NATS_TLS_KEY) and connects to that in process, as the worker role (a login the
// server makes at start; the LA_NATS_* credentials are the producers').
// embedded is nil when an external server is used; the caller shuts it down after
// closing the connection. The worker's replies come on its own inbox prefix, which the
// producer role may not subscribe to.
func connectNATS(cfg config.Worker, log *slog.Logger) (nc *nats.Conn, embedded *natsembed.Server, err error) {
	conn, name := cfg.NATS, "la-worker "+cfg.Runner.WorkerName
	conn.InboxPrefix = natsembed.WorkerInboxPrefix
	if cfg.NATS.URL != "" {
		nc, err = conn.Connect("", name, log)
		return nc, nil, err
	}
	opts := cfg.EmbeddedServer()
	opts.Logger = log
	if opts.TLS, err = embeddedTLS(cfg.NATS); err != nil {
		return nil, nil, err
	}
	embedded, err = natsembed.Start(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (set LA_NATS_LISTEN to another address, or LA_NATS_URL to use an existing server)", err)
	}
	log.Info("embedded NATS server started", "url", embedded.ClientURL(), "store", opts.StoreDir,
		"auth", embeddedAuth(cfg.NATS), "operator", opts.OperatorUser != "", "tls", opts.TLS != nil)
	conn.User, conn.Password = embedded.WorkerLogin()
	conn.Token = ""
	nc, err = conn.ConnectInProcess(embedded, name, log)
	if err != nil {
		embedded.Shutdown()
		return nil, nil, err
	}
	return nc, embedded, nil
}

// embeddedAuth names how the embedded server's clients authenticate, for the log.
func embeddedAuth(n config.NATS) string {
	switch {
	case n.User != "":
		return "user and password"
	case n.Token != "":
		return "token"
	case n.TLSCA != "":
		return "client certificate"
	}
	return "none"
}

// embeddedTLS is the embedded server's TLS configuration, nil without a certificate:
// LA_NATS_TLS_CERT and LA_NATS_TLS_KEY are its certificate, and LA_NATS_TLS_CA, when set,
// the CA that must sign its clients' certificates.
func embeddedTLS(n config.NATS) (*tls.Config, error) {
	if n.TLSCert == "" && n.TLSKey == "" {
		return nil, nil
	}
	if n.TLSCert == "" || n.TLSKey == "" {
		return nil, errors.New("LA_NATS_TLS_CERT and LA_NATS_TLS_KEY must be set together")
	}
	cert, err := tls.LoadX509KeyPair(n.TLSCert, n.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("LA_NATS_TLS_CERT/LA_NATS_TLS_KEY (the embedded NATS server's certificate): %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if n.TLSCA != "" {
		pool, err := tlsfiles.CertPool(n.TLSCA, nil)
		if err != nil {
			return nil, fmt.Errorf("LA_NATS_TLS_CA (the CA of the embedded NATS server's clients): %w", err)
		}
		tc.ClientAuth, tc.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	return tc, nil
}
