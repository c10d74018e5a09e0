// Package natsembed runs a NATS server with JetStream inside the worker process, for the
// single-machine default (no LA_NATS_URL configured) and for tests.
//
// A server that listens beyond the loopback interface must authenticate its clients (a user
// and password, a token, or client certificates): anyone who can publish a job can make the
// worker read and write files, so Start refuses an open server on the network.
//
// A server that authenticates gives each client the permissions of its role (roles.go):
// producers publish jobs, read results and state and request cancels; the worker, which
// alone knows its login, runs them; an operator may do anything.
package natsembed

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure an embedded server.
type Options struct {
	// Listen is host:port for client connections; port 0 or -1 picks a free one.
	Listen string
	// StoreDir holds the JetStream file store. Required.
	StoreDir string
	// ServerName names the server in logs and advisories; a default is derived if empty.
	ServerName string
	// ReadyTimeout bounds the wait for the listener and JetStream; 10 s if zero.
	ReadyTimeout time.Duration
	// Logger receives the server's notices and errors; nil silences the server.
	Logger *slog.Logger
	// Cluster, when its Name is set, makes the server one node of a JetStream cluster.
	Cluster ClusterOptions

	// User and Password, or Token, are what producers must present (not both kinds).
	User, Password string
	Token          string
	// OperatorUser and OperatorPassword, when set, are the operator's login: every
	// permission (dead-letter replay, purges).
	OperatorUser, OperatorPassword string
	// TLS, when set, is the server's TLS configuration: clients must connect with TLS. With
	// ClientAuth tls.RequireAndVerifyClientCert and ClientCAs set, clients must also present
	// a certificate signed by one of those CAs (mutual TLS), which authenticates them (a
	// certificate and no other credentials is a producer).
	TLS *tls.Config
	// TLSTimeout bounds a client's TLS handshake; 5 s if zero.
	TLSTimeout time.Duration
}

// Authenticated reports whether clients must prove who they are: a user and password, a
// token, or a client certificate.
func (o Options) Authenticated() bool {
	return o.User != "" || o.Token != "" || o.OperatorUser != "" || o.mutualTLS()
}

func (o Options) mutualTLS() bool {
	return o.TLS != nil && o.TLS.ClientAuth == tls.RequireAndVerifyClientCert && o.TLS.ClientCAs != nil
}

// checkAuth refuses contradictory credentials and an unauthenticated server reachable
// from the network.
func (o Options) checkAuth(host string) error {
	switch {
	case (o.User == "") != (o.Password == ""):
		return errors.New("embedded NATS: a user needs a password and a password a user")
	case o.User != "" && o.Token != "":
		return errors.New("embedded NATS: authenticate clients by user and password or by token, not both")
	case (o.OperatorUser == "") != (o.OperatorPassword == ""):
		return errors.New("embedded NATS: the operator's user needs a password and its password a user")
	case o.OperatorUser != "" && o.OperatorUser == o.User:
		return errors.New("embedded NATS: the operator and the producers need different users")
	case o.OperatorUser == workerUser || o.User == workerUser:
		return fmt.Errorf("embedded NATS: the user name %q is the worker's own", workerUser)
	case o.TLS != nil && len(o.TLS.Certificates) == 0 && o.TLS.GetCertificate == nil:
		return errors.New("embedded NATS: TLS needs the server's certificate")
	case !loopbackHost(host) && !o.Authenticated():
		return fmt.Errorf("embedded NATS: listen address %q is not on the loopback interface, and clients "+
			"would not be authenticated: anyone on the network could publish jobs; give the server a user "+
			"and password, a token or client certificates, or listen on 127.0.0.1", o.Listen)
	}
	return nil
}

// loopbackHost reports whether host names the loopback interface only.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ClusterOptions join a server to a cluster. Every node needs a distinct ServerName.
type ClusterOptions struct {
	Name   string   // cluster name, the same on every node
	Listen string   // host:port of this node's route listener
	Routes []string // nats-route://host:port of the nodes (this one may be included)
}

// Server is a running embedded NATS server.
type Server struct {
	ns     *server.Server
	worker login
}

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded NATS: a JetStream store directory is required")
	}
	host, port, err := splitListen(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: listen address %q: %w", o.Listen, err)
	}
	if err := o.checkAuth(host); err != nil {
		return nil, err
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	if o.TLSTimeout == 0 {
		o.TLSTimeout = 5 * time.Second
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true, // the worker owns signal handling
		NoLog:      o.Logger == nil,
	}
	var auth *roleAuth
	if o.Authenticated() {
		if auth, err = newRoleAuth(o); err != nil {
			return nil, err
		}
		opts.CustomClientAuthentication = auth
	}
	if o.TLS != nil {
		opts.TLSConfig = o.TLS.Clone()
		opts.TLSTimeout = o.TLSTimeout.Seconds()
		opts.TLSVerify = o.mutualTLS()
	}
	if o.Cluster.Name != "" {
		if o.ServerName == "" {
			return nil, fmt.Errorf("embedded NATS: a cluster node needs a server name")
		}
		chost, cport, err := splitListen(o.Cluster.Listen)
		if err != nil || o.Cluster.Listen == "" {
			return nil, fmt.Errorf("embedded NATS: cluster listen address %q: want host:port", o.Cluster.Listen)
		}
		if !loopbackHost(chost) {
			// Routes are not authenticated here: a peer on the network could join as a
			// route and read every message.
			return nil, fmt.Errorf("embedded NATS: cluster listen address %q: routes are not authenticated, so they listen on loopback only", o.Cluster.Listen)
		}
		opts.Cluster = server.ClusterOpts{Name: o.Cluster.Name, Host: chost, Port: cport}
		opts.Routes = server.RoutesFromStr(strings.Join(o.Cluster.Routes, ","))
	}
	// The server itself reports a port it cannot listen on only by never becoming ready
	// (ReadyTimeout, 10 s); listening first says so at once and names the cause.
	if err := canListen(host, port); err != nil {
		return nil, fmt.Errorf("embedded NATS: client listen address %s: %w", o.Listen, err)
	}
	if o.Cluster.Name != "" {
		if err := canListen(opts.Cluster.Host, opts.Cluster.Port); err != nil {
			return nil, fmt.Errorf("embedded NATS: cluster listen address %s: %w", o.Cluster.Listen, err)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if o.Logger != nil {
		ns.SetLoggerV2(slogAdapter{o.Logger.With("component", "nats-server")}, false, false, false)
	}
	ns.Start()
	if !ns.ReadyForConnections(o.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS on %s: not ready within %s (port in use?)", o.Listen, o.ReadyTimeout)
	}
	s := &Server{ns: ns}
	if auth != nil {
		s.worker = auth.worker
	}
	return s, nil
}

// WorkerLogin is the user and password of the worker's role, for its in-process
// connection; empty when the server does not authenticate. It is made at start and
// never leaves the process.
func (s *Server) WorkerLogin() (user, password string) { return s.worker.user, s.worker.password }

// ClientURL is the URL clients connect to: nats://host:port, or tls://host:port when the
// server requires TLS.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// InProcessConn is a connection to the server that does not leave the process (no TLS is
// needed; authentication still is): for nats.InProcessServer.
func (s *Server) InProcessConn() (net.Conn, error) { return s.ns.InProcessConn() }

// Shutdown stops the server and waits until it has flushed its store and stopped.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// NATSServer exposes the underlying server, for tests that inspect JetStream state.
func (s *Server) NATSServer() *server.Server { return s.ns }

// canListen opens and closes a listener on host:port, the error the server would meet
// (typically "address already in use"). A random port is always available. The port is
// free again for the server at once: Go's listeners set SO_REUSEADDR.
func canListen(host string, port int) error {
	if port == server.RANDOM_PORT || port == 0 {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

func splitListen(listen string) (string, int, error) {
	if listen == "" {
		return "127.0.0.1", 4222, nil
	}
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number in 0-65535", p)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// slogAdapter routes the server's logger interface into slog. Debug and trace output is
// off (SetLoggerV2 flags false), so those methods only exist to satisfy the interface.
// The server's notices (its start-up banner, some thirty lines) go to debug: in a worker's
// log they would bury the worker's own lines; its warnings and errors stay visible.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
