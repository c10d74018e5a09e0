package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/pkitest"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

const (
	password  = "pw-Submit-Secret-R4t7"
	wrongPass = "pw-Submit-Wrong-H1d9"
	token     = "tok-Submit-Secret-L6s2"
)

// natsVariables are every LA_NATS_* setting submit reads but the URL.
var natsVariables = []string{"LA_NATS_CREDS", "LA_NATS_NKEY_FILE", "LA_NATS_USER", "LA_NATS_PASSWORD",
	"LA_NATS_TOKEN", "LA_NATS_TLS_CA", "LA_NATS_TLS_CERT", "LA_NATS_TLS_KEY"}

// TestSubmitAuthenticates runs `submit dlq list` through cmd/submit's own configuration
// loading against a real server for each way LA_NATS_* authenticates: the right settings
// get in (exit 0); wrong or missing ones exit 3 with the variable to check, quoting no
// secret.
func TestSubmitAuthenticates(t *testing.T) {
	ca, other := pkitest.NewCA(t, "la-nats"), pkitest.NewCA(t, "someone-else")
	serverPair, client, stranger := ca.Server(t, "nats"), ca.Client(t, "submit"), other.Client(t, "stranger")
	nkeyPub, nkeySeed := natstest.NKeyUser(t)
	_, otherSeed := natstest.NKeyUser(t)
	op := natstest.NewOperator(t)
	jetStream := func(configure func(*server.Options)) func(*server.Options) {
		return func(o *server.Options) {
			o.JetStream = true
			if configure != nil {
				configure(o)
			}
		}
	}
	for _, c := range []struct {
		name        string
		url         string
		good, wrong map[string]string
		wantWrong   string
		wantNone    string
	}{
		{
			name:      "user and password",
			url:       natstest.StartWith(t, natsembed.Options{User: "submit", Password: password}).ClientURL(),
			good:      map[string]string{"LA_NATS_USER": "submit", "LA_NATS_PASSWORD": password},
			wrong:     map[string]string{"LA_NATS_USER": "submit", "LA_NATS_PASSWORD": wrongPass},
			wantWrong: "check LA_NATS_USER and LA_NATS_PASSWORD",
			wantNone:  "requires authentication",
		},
		{
			name:      "token",
			url:       natstest.StartWith(t, natsembed.Options{Token: token}).ClientURL(),
			good:      map[string]string{"LA_NATS_TOKEN": token},
			wrong:     map[string]string{"LA_NATS_TOKEN": wrongPass},
			wantWrong: "check LA_NATS_TOKEN",
			wantNone:  "requires authentication",
		},
		{
			name: "nkey",
			url: natstest.StartServer(t, jetStream(func(o *server.Options) {
				o.Nkeys = []*server.NkeyUser{{Nkey: nkeyPub}}
			})).ClientURL(),
			good:      map[string]string{"LA_NATS_NKEY_FILE": nkeySeed},
			wrong:     map[string]string{"LA_NATS_NKEY_FILE": otherSeed},
			wantWrong: "check LA_NATS_NKEY_FILE",
			wantNone:  "requires authentication",
		},
		{
			name:      "creds",
			url:       natstest.StartServer(t, jetStream(op.Configure(t))).ClientURL(),
			good:      map[string]string{"LA_NATS_CREDS": op.Creds(t, "submit", time.Time{})},
			wrong:     map[string]string{"LA_NATS_CREDS": natstest.NewOperator(t).Creds(t, "stranger", time.Time{})},
			wantWrong: "check LA_NATS_CREDS",
			wantNone:  "requires authentication",
		},
		{
			name:      "TLS with a private CA",
			url:       natstest.StartWith(t, natsembed.Options{TLS: pkitest.ServerTLS(t, serverPair, nil)}).ClientURL(),
			good:      map[string]string{"LA_NATS_TLS_CA": ca.File},
			wrong:     map[string]string{"LA_NATS_TLS_CA": other.File},
			wantWrong: "not signed by the CA in LA_NATS_TLS_CA",
			wantNone:  "set LA_NATS_TLS_CA",
		},
		{
			name: "mutual TLS",
			url:  natstest.StartWith(t, natsembed.Options{TLS: pkitest.ServerTLS(t, serverPair, ca)}).ClientURL(),
			good: map[string]string{"LA_NATS_TLS_CA": ca.File, "LA_NATS_TLS_CERT": client.CertFile, "LA_NATS_TLS_KEY": client.KeyFile},
			wrong: map[string]string{"LA_NATS_TLS_CA": ca.File, "LA_NATS_TLS_CERT": stranger.CertFile,
				"LA_NATS_TLS_KEY": stranger.KeyFile},
			wantWrong: "check that LA_NATS_TLS_CERT",
			wantNone:  "set LA_NATS_TLS_CA",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("LA_NATS_URL", c.url)
			t.Setenv("LA_NATS_TIMEOUT", "5s")
			setNATS(t, c.good)
			ensureTopology(t)
			if code, stdout, stderr := submitCLI(t, "dlq", "list"); code != ExitOK {
				t.Fatalf("right settings: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			for what, vars := range map[string]map[string]string{"wrong": c.wrong, "no": nil} {
				want := c.wantWrong
				if vars == nil {
					want = c.wantNone
				}
				setNATS(t, vars)
				code, stdout, stderr := submitCLI(t, "dlq", "list")
				if code != ExitUnavailable || !strings.Contains(stderr, want) {
					t.Errorf("%s settings: exit %d, stderr %q; want %d naming %q", what, code, stderr, ExitUnavailable, want)
				}
				for _, secret := range []string{password, wrongPass, token} {
					if strings.Contains(stdout+stderr, secret) {
						t.Errorf("%s settings: the output quotes a secret: %s", what, stderr)
					}
				}
			}
		})
	}
}

// setNATS sets the LA_NATS_* variables to vars, and every other one to empty.
func setNATS(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, k := range natsVariables {
		t.Setenv(k, vars[k])
	}
}

// submitCLI runs the CLI as main does, with cmd/submit's loadConfig.
func submitCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = Main(ctx, args, IO{Stdout: &out, Stderr: &errOut, LoadConfig: loadConfig})
	return code, out.String(), errOut.String()
}

// ensureTopology creates the streams and buckets a worker would, with the settings in the
// environment, so that the CLI has something to read.
func ensureTopology(t *testing.T) {
	t.Helper()
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := cfg.NATS.Connect("", "la-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var w config.Worker
	if err := envconfig.Process("", &w); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.EnsureTopology(t.Context(), js, w.Topology); err != nil {
		t.Fatalf("topology: %v", err)
	}
}
