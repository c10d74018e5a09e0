package natsconn

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/locateanything/detect/internal/pkitest"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// Secrets the tests hand out; no error may quote them.
const (
	password   = "pw-Correct-Horse-7731"
	wrongPass  = "pw-Wrong-Battery-1154"
	token      = "tok-Staple-0042-secret"
	wrongToken = "tok-Guess-9999-secret"
)

// connects asserts that cfg connects to url and the connection works.
func connects(t *testing.T, cfg Config, url string) {
	t.Helper()
	cfg.Timeout = 5 * time.Second
	nc, err := cfg.Connect(url, "la-test", nil)
	if err != nil {
		t.Fatalf("connect with %s: %v", describe(cfg), err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// refused asserts that cfg fails to connect to url with an error naming want and quoting
// none of the secrets.
func refused(t *testing.T, cfg Config, url, want string, secrets ...string) {
	t.Helper()
	cfg.Timeout = 5 * time.Second
	nc, err := cfg.Connect(url, "la-test", nil)
	if err == nil {
		nc.Close()
		t.Fatalf("connected with %s; want a refusal", describe(cfg))
	}
	t.Logf("%s: %v", describe(cfg), err)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("with %s: error %q does not name %q", describe(cfg), err, want)
	}
	for _, s := range append(secrets, password, wrongPass, token, wrongToken) {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error quotes a secret: %q", err)
		}
	}
}

// describe names the settings of cfg without their values.
func describe(cfg Config) string {
	var set []string
	for name, v := range map[string]string{"creds": cfg.Creds, "nkey": cfg.NKeyFile, "user": cfg.User,
		"password": cfg.Password, "token": cfg.Token, "ca": cfg.TLSCA, "cert": cfg.TLSCert} {
		if v != "" {
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		return "no credentials"
	}
	return strings.Join(set, "+")
}

func TestUserAndPassword(t *testing.T) {
	url := natstest.StartWith(t, natsembed.Options{User: "la", Password: password}).ClientURL()
	connects(t, Config{User: "la", Password: password}, url)
	refused(t, Config{User: "la", Password: wrongPass}, url, "check LA_NATS_USER and LA_NATS_PASSWORD")
	refused(t, Config{User: "other", Password: password}, url, "check LA_NATS_USER and LA_NATS_PASSWORD")
	refused(t, Config{}, url, "requires authentication: set LA_NATS_CREDS, LA_NATS_NKEY_FILE, LA_NATS_USER and LA_NATS_PASSWORD, or LA_NATS_TOKEN")
	// Credentials in the URL itself work too, and the error hides them.
	host := strings.TrimPrefix(url, "nats://")
	connects(t, Config{}, "nats://la:"+password+"@"+host)
	refused(t, Config{}, "nats://la:"+wrongPass+"@"+host, "check the credentials in LA_NATS_URL")
}

func TestToken(t *testing.T) {
	url := natstest.StartWith(t, natsembed.Options{Token: token}).ClientURL()
	connects(t, Config{Token: token}, url)
	refused(t, Config{Token: wrongToken}, url, "check LA_NATS_TOKEN")
	refused(t, Config{}, url, "requires authentication")
	refused(t, Config{}, "nats://"+wrongToken+"@"+strings.TrimPrefix(url, "nats://"), "check the credentials in LA_NATS_URL")
}

func TestNKey(t *testing.T) {
	public, seedFile := natstest.NKeyUser(t)
	_, otherSeed := natstest.NKeyUser(t)
	s := natstest.StartServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: public}} })
	url := s.ClientURL()
	connects(t, Config{NKeyFile: seedFile}, url)
	refused(t, Config{NKeyFile: otherSeed}, url, "check LA_NATS_NKEY_FILE", readFile(t, otherSeed), readFile(t, seedFile))
	refused(t, Config{}, url, "requires authentication")
}

func TestCredsFile(t *testing.T) {
	op := natstest.NewOperator(t)
	s := natstest.StartServer(t, op.Configure(t))
	url := s.ClientURL()
	good := op.Creds(t, "worker", time.Time{})
	connects(t, Config{Creds: good}, url)

	stranger := natstest.NewOperator(t).Creds(t, "stranger", time.Time{}) // signed by another operator
	refused(t, Config{Creds: stranger}, url, "check LA_NATS_CREDS", credsSecrets(t, stranger)...)
	expired := op.Creds(t, "expired", time.Now().Add(-time.Minute))
	refused(t, Config{Creds: expired}, url, "LA_NATS_CREDS", credsSecrets(t, expired)...)
	refused(t, Config{}, url, "requires authentication")
	if _, err := (Config{Creds: good + ".missing"}).Options("t", nil); err == nil || !strings.Contains(err.Error(), "LA_NATS_CREDS") {
		t.Errorf("a missing creds file: %v; want an error naming LA_NATS_CREDS", err)
	}
}

func TestTLSWithAPrivateCA(t *testing.T) {
	ca, other := pkitest.NewCA(t, "la-nats-ca"), pkitest.NewCA(t, "someone-else")
	s := natstest.StartWith(t, natsembed.Options{TLS: pkitest.ServerTLS(t, ca.Server(t, "nats"), nil)})
	url := s.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Fatalf("client URL %s: want tls://", url)
	}
	connects(t, Config{TLSCA: ca.File}, url)
	connects(t, Config{TLSCA: ca.File}, strings.Replace(url, "tls://", "nats://", 1)) // the server asks for TLS
	refused(t, Config{}, url, "set LA_NATS_TLS_CA")
	refused(t, Config{TLSCA: other.File}, url, "not signed by the CA in LA_NATS_TLS_CA")
	localhost := strings.Replace(url, "127.0.0.1", "localhost", 1)
	connects(t, Config{TLSCA: ca.File}, localhost)

	plain := natstest.Start(t).ClientURL()
	refused(t, Config{TLSCA: ca.File}, plain, "the server does not offer TLS")
}

func TestMutualTLS(t *testing.T) {
	ca, other := pkitest.NewCA(t, "la-nats-ca"), pkitest.NewCA(t, "someone-else")
	s := natstest.StartWith(t, natsembed.Options{TLS: pkitest.ServerTLS(t, ca.Server(t, "nats"), ca)})
	url := s.ClientURL()
	client := ca.Client(t, "la-worker")
	connects(t, Config{TLSCA: ca.File, TLSCert: client.CertFile, TLSKey: client.KeyFile}, url)
	refused(t, Config{TLSCA: ca.File}, url, "set LA_NATS_TLS_CERT and LA_NATS_TLS_KEY")
	stranger := other.Client(t, "stranger")
	refused(t, Config{TLSCA: ca.File, TLSCert: stranger.CertFile, TLSKey: stranger.KeyFile}, url, "check that LA_NATS_TLS_CERT")
}

// TestAuthAndTLSTogether: a user and password over mutual TLS, as a production server is
// usually set up.
func TestAuthAndTLSTogether(t *testing.T) {
	ca := pkitest.NewCA(t, "la-nats-ca")
	s := natstest.StartWith(t, natsembed.Options{Listen: "0.0.0.0:-1", User: "la", Password: password,
		TLS: pkitest.ServerTLS(t, ca.Server(t, "nats"), ca)})
	url := strings.Replace(s.ClientURL(), "0.0.0.0", "127.0.0.1", 1)
	client := ca.Client(t, "la-worker")
	good := Config{User: "la", Password: password, TLSCA: ca.File, TLSCert: client.CertFile, TLSKey: client.KeyFile}
	connects(t, good, url)
	bad := good
	bad.Password = wrongPass
	refused(t, bad, url, "check LA_NATS_USER and LA_NATS_PASSWORD")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	return strings.TrimSpace(string(must(t, path)))
}

// credsSecrets are the JWT and seed lines of a .creds file.
func credsSecrets(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(string(must(t, path)), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "ey") || strings.HasPrefix(line, "SU") {
			out = append(out, line)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%s: want a JWT and a seed, found %d secrets", path, len(out))
	}
	return out
}
