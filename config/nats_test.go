package config

import (
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"
)

// natsWorker is a Worker with every default (as envconfig fills them) and the NATS
// settings under test.
func natsWorker(t *testing.T, listen string, n NATS) Worker {
	t.Helper()
	var c Worker
	if err := envconfig.Process("", &c); err != nil {
		t.Fatal(err)
	}
	c.DataDir = t.TempDir()
	n.Timeout = c.NATS.Timeout
	c.NATS, c.Embedded.Listen = n, listen
	return c
}

// TestEmbeddedOffLoopbackNeedsAuthentication: whoever can publish a job can make the worker
// read and write files, so an embedded server reachable from the network must check who
// its clients are.
func TestEmbeddedOffLoopbackNeedsAuthentication(t *testing.T) {
	if err := natsWorker(t, "127.0.0.1:4222", NATS{}).Validate(); err != nil {
		t.Fatalf("the loopback default: %v", err)
	}
	for _, listen := range []string{"0.0.0.0:4222", ":4222", "[::]:4222", "192.0.2.7:4222", "nats.example:4222"} {
		for _, n := range []NATS{{}, {TLSCert: "c.pem", TLSKey: "k.pem"}} {
			err := natsWorker(t, listen, n).Validate()
			if err == nil || !strings.Contains(err.Error(), "LA_NATS_LISTEN="+listen+" is not a loopback address") ||
				!strings.Contains(err.Error(), "LA_NATS_USER and LA_NATS_PASSWORD, or LA_NATS_TOKEN") {
				t.Errorf("listen %s with %+v: %v; want a refusal naming the variables to set", listen, n, err)
			}
		}
	}
	for _, n := range []NATS{
		{User: "la", Password: "pw"},
		{Token: "tok"},
		{User: "la", Password: "pw", TLSCert: "c.pem", TLSKey: "k.pem"},
		{TLSCA: "ca.pem", TLSCert: "c.pem", TLSKey: "k.pem"}, // mutual TLS
	} {
		if err := natsWorker(t, "0.0.0.0:4222", n).Validate(); err != nil {
			t.Errorf("0.0.0.0 with %+v: %v", redact(n), err)
		}
	}
	// An external server is the operator's to secure.
	if err := natsWorker(t, "0.0.0.0:4222", NATS{URL: "nats://n1:4222"}).Validate(); err != nil {
		t.Errorf("external server: %v", err)
	}
}

func TestEmbeddedAuthSettingsMustAgree(t *testing.T) {
	for _, c := range []struct {
		n    NATS
		want string
	}{
		{NATS{User: "la"}, "LA_NATS_USER is set without LA_NATS_PASSWORD"},
		{NATS{Password: "pw"}, "LA_NATS_PASSWORD is set without LA_NATS_USER"},
		{NATS{User: "la", Password: "pw", Token: "tok"}, "LA_NATS_USER and LA_NATS_TOKEN are both set"},
		{NATS{Creds: "w.creds"}, "LA_NATS_CREDS is set but LA_NATS_URL is empty"},
		{NATS{NKeyFile: "w.nk"}, "LA_NATS_NKEY_FILE is set but LA_NATS_URL is empty"},
		{NATS{TLSCA: "ca.pem"}, "without its own certificate: set LA_NATS_TLS_CERT and LA_NATS_TLS_KEY"},
		{NATS{URL: "nats://n1", Creds: "w.creds", NKeyFile: "w.nk"}, "LA_NATS_CREDS and LA_NATS_NKEY_FILE are both set"},
		{NATS{URL: "nats://n1", Password: "pw"}, "LA_NATS_PASSWORD is set without LA_NATS_USER"},
	} {
		err := natsWorker(t, "127.0.0.1:4222", c.n).Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", redact(c.n), err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "tok")) {
			t.Errorf("the error quotes a secret: %v", err)
		}
	}
	// Against an external server a user without a password, or a token beside a user, is
	// that server's business.
	if err := natsWorker(t, "127.0.0.1:4222", NATS{URL: "nats://n1", User: "la", Token: "tok"}).Validate(); err != nil {
		t.Errorf("external server: %v", err)
	}
}

func TestEmbeddedServerOptions(t *testing.T) {
	c := natsWorker(t, "0.0.0.0:4222", NATS{User: "la", Password: "pw"})
	o := c.EmbeddedServer()
	if o.Listen != "0.0.0.0:4222" || o.User != "la" || o.Password != "pw" || o.Token != "" ||
		!strings.HasPrefix(o.StoreDir, c.DataDir) || !o.Authenticated() {
		t.Errorf("EmbeddedServer() = %+v", o)
	}
}

func redact(n NATS) NATS {
	if n.Password != "" {
		n.Password = Redacted
	}
	if n.Token != "" {
		n.Token = Redacted
	}
	return n
}

// TestEmbeddedOperatorSettings: the operator's login is the embedded server's, complete,
// and not the producers'.
func TestEmbeddedOperatorSettings(t *testing.T) {
	withOperator := func(url, user, password string) Worker {
		c := natsWorker(t, "127.0.0.1:4222", NATS{URL: url, User: "producer", Password: "pw"})
		c.Embedded.OperatorUser, c.Embedded.OperatorPassword = user, password
		return c
	}
	for _, c := range []struct {
		w    Worker
		want string
	}{
		{withOperator("", "ops", ""), "LA_NATS_OPERATOR_USER and LA_NATS_OPERATOR_PASSWORD must be set together"},
		{withOperator("", "", "pw-ops"), "LA_NATS_OPERATOR_USER and LA_NATS_OPERATOR_PASSWORD must be set together"},
		{withOperator("", "producer", "pw-ops"), "the operator and the producers need different users"},
		{withOperator("nats://n1", "ops", "pw-ops"), "they define the embedded server's operator"},
	} {
		err := c.w.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s: %v; want %q", c.w.Embedded.OperatorUser, c.w.NATS.URL, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw-ops") {
			t.Errorf("the error quotes a secret: %v", err)
		}
	}
	c := withOperator("", "ops", "pw-ops")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if o := c.EmbeddedServer(); o.OperatorUser != "ops" || o.OperatorPassword != "pw-ops" || o.User != "producer" {
		t.Errorf("EmbeddedServer() = %+v", o)
	}
}
