package natsembed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/pkitest"
)

// TestEveryProducerCredentialIsAProducer: a user and password, a token and a client
// certificate alone each make a producer, which may publish jobs but not delete a stream;
// the worker's login (in process) and the operator's may.
func TestEveryProducerCredentialIsAProducer(t *testing.T) {
	ca := pkitest.NewCA(t, "la-test")
	client := ca.Client(t, "producer")
	for _, c := range []struct {
		name     string
		o        Options
		producer []nats.Option
	}{
		{"user and password", Options{User: "producer", Password: "pw-p", OperatorUser: "ops", OperatorPassword: "pw-o"},
			[]nats.Option{nats.UserInfo("producer", "pw-p")}},
		{"token", Options{Token: "tok-p", OperatorUser: "ops", OperatorPassword: "pw-o"},
			[]nats.Option{nats.Token("tok-p")}},
		{"client certificate", Options{TLS: pkitest.ServerTLS(t, ca.Server(t, "nats"), ca), OperatorUser: "ops", OperatorPassword: "pw-o"},
			[]nats.Option{nats.ClientCert(client.CertFile, client.KeyFile), nats.RootCAs(ca.File)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Listen, c.o.StoreDir = "127.0.0.1:-1", t.TempDir()
			s, err := Start(c.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown()
			user, password := s.WorkerLogin()
			worker := jsFor(t, "", nats.InProcessServer(s), nats.UserInfo(user, password), nats.CustomInboxPrefix(WorkerInboxPrefix))
			if _, err := worker.CreateStream(t.Context(), jetstream.StreamConfig{Name: jobsStream, Subjects: []string{"la.jobs.>"}}); err != nil {
				t.Fatalf("worker: create %s: %v", jobsStream, err)
			}
			producer := jsFor(t, s.ClientURL(), c.producer...)
			if _, err := producer.Publish(t.Context(), "la.jobs.default", []byte(`{}`)); err != nil {
				t.Errorf("producer: publish a job: %v", err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			if err := producer.DeleteStream(ctx, jobsStream); err == nil {
				t.Error("producer: deleted the stream")
			}
			if last := producer.Conn().LastError(); !errors.Is(last, nats.ErrPermissionViolation) || !strings.Contains(last.Error(), "STREAM.DELETE") {
				t.Errorf("producer: the delete was not refused for want of permission: %v", last)
			}
			operatorOpts := []nats.Option{nats.UserInfo("ops", "pw-o")}
			if c.o.TLS != nil {
				operatorOpts = append(operatorOpts, nats.ClientCert(client.CertFile, client.KeyFile), nats.RootCAs(ca.File))
			}
			if err := jsFor(t, s.ClientURL(), operatorOpts...).DeleteStream(t.Context(), jobsStream); err != nil {
				t.Errorf("operator: delete the stream: %v", err)
			}
		})
	}
}

// TestWrongCredentialsAreRefused: neither a wrong password, nor the producers' user with
// the operator's password, nor the worker's user name from outside gets in.
func TestWrongCredentialsAreRefused(t *testing.T) {
	s, err := Start(Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), User: "producer", Password: "pw-p",
		OperatorUser: "ops", OperatorPassword: "pw-o"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	for _, login := range [][2]string{{"producer", "pw-o"}, {"ops", "pw-p"}, {workerUser, "pw-p"}, {workerUser, ""}, {"", ""}} {
		if nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(login[0], login[1])); err == nil {
			nc.Close()
			t.Errorf("%q with a wrong password: connected", login[0])
		}
	}
}

func TestRoleLoginsMustBeDistinct(t *testing.T) {
	for name, o := range map[string]Options{
		"operator without password":  {OperatorUser: "ops"},
		"operator is the producer":   {User: "la", Password: "pw", OperatorUser: "la", OperatorPassword: "pw2"},
		"producer named as a worker": {User: workerUser, Password: "pw"},
	} {
		o.Listen, o.StoreDir = "127.0.0.1:-1", t.TempDir()
		if s, err := Start(o); err == nil {
			s.Shutdown()
			t.Errorf("%s: started", name)
		}
	}
}

// jsFor connects with opts (to url, or in process) until the test ends.
func jsFor(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
