package natstest

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/locateanything/detect/jobs/natsembed"
)

// This file starts servers configured for each way of authenticating that LA_NATS_*
// offers, for tests of the clients: user and password, token and TLS as an external
// nats-server configured with them does it (StartWith), and NKeys and decentralised JWT
// auth (.creds) through a server configured directly.

// StartWith runs a JetStream server until the test ends that authenticates its clients as
// o says (User and Password, or Token; TLS, mutual when o.TLS requires client
// certificates) the way an external nats-server configured with one user does: every
// client it admits may do anything. (The embedded server's roles are natsembed's own;
// start it with natsembed.Start to test them.) Listen defaults to a random 127.0.0.1 port.
func StartWith(t testing.TB, o natsembed.Options) *server.Server {
	t.Helper()
	host, port := "127.0.0.1", server.RANDOM_PORT
	if o.Listen != "" {
		h, p, err := net.SplitHostPort(o.Listen)
		if err != nil {
			t.Fatalf("natstest: listen address %q: %v", o.Listen, err)
		}
		if n, err := strconv.Atoi(p); err == nil && n > 0 {
			port = n
		}
		host = h
	}
	return StartServer(t, func(so *server.Options) {
		so.Host, so.Port, so.JetStream = host, port, true
		if o.StoreDir != "" {
			so.StoreDir = o.StoreDir
		}
		so.Username, so.Password, so.Authorization = o.User, o.Password, o.Token
		if o.TLS != nil {
			so.TLSConfig = o.TLS.Clone()
			so.TLSTimeout = 5
			so.TLSVerify = o.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		}
	})
}

// StartServer runs a nats-server configured by configure (after a random 127.0.0.1 port,
// no signals and no log are set) until the test ends. JetStream stays off unless configure
// turns it on.
func StartServer(t testing.TB, configure func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true, StoreDir: t.TempDir()}
	if configure != nil {
		configure(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready within 10s")
	}
	return s
}

// NKeyUser makes a user NKey: its public key, for the server's list of users, and its seed
// written to a file, as LA_NATS_NKEY_FILE takes it.
func NKeyUser(t testing.TB) (public, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	check(t, err)
	public, err = kp.PublicKey()
	check(t, err)
	seed, err := kp.Seed()
	check(t, err)
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return public, seedFile
}

// Operator is decentralised JWT authentication as `nsc` sets it up: an operator, one
// account signed by it, and users signed by the account, each handed out as a .creds file.
type Operator struct {
	claims     *jwt.OperatorClaims
	accountPub string
	accountJWT string
	accountKey nkeys.KeyPair
	systemPub  string // the system account, which JetStream needs in operator mode
	systemJWT  string
}

// NewOperator makes an operator, one account with JetStream enabled, and the system
// account.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	check(t, err)
	opub, err := okp.PublicKey()
	check(t, err)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "la-test-operator"
	ojwt, err := oc.Encode(okp)
	check(t, err)
	claims, err := jwt.DecodeOperatorClaims(ojwt)
	check(t, err)

	akp, err := nkeys.CreateAccount()
	check(t, err)
	apub, err := akp.PublicKey()
	check(t, err)
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "la"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	check(t, err)

	skp, err := nkeys.CreateAccount()
	check(t, err)
	spub, err := skp.PublicKey()
	check(t, err)
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	sjwt, err := sc.Encode(okp)
	check(t, err)
	return &Operator{claims: claims, accountPub: apub, accountJWT: ajwt, accountKey: akp, systemPub: spub, systemJWT: sjwt}
}

// Configure makes a server trust the operator and know its account.
func (o *Operator) Configure(t testing.TB) func(*server.Options) {
	return func(opts *server.Options) {
		resolver := &server.MemAccResolver{}
		for pub, claims := range map[string]string{o.accountPub: o.accountJWT, o.systemPub: o.systemJWT} {
			if err := resolver.Store(pub, claims); err != nil {
				t.Fatal(err)
			}
		}
		opts.TrustedOperators = []*jwt.OperatorClaims{o.claims}
		opts.AccountResolver = resolver
		opts.SystemAccount = o.systemPub
	}
}

// Creds makes a user of the account and writes its .creds file (the user JWT and NKey
// seed), as LA_NATS_CREDS takes it. A non-zero expires makes the JWT expire then.
func (o *Operator) Creds(t testing.TB, name string, expires time.Time) string {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	check(t, err)
	upub, err := ukp.PublicKey()
	check(t, err)
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	ujwt, err := uc.Encode(o.accountKey)
	check(t, err)
	seed, err := ukp.Seed()
	check(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	check(t, err)
	path := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// check fails the test on an error.
func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
}
