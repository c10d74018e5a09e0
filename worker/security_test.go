package worker

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/pkitest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsconn"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// setEnv sets the variables for the rest of the test.
func setEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

// networkWorkerEnv is a worker whose embedded NATS listens on every interface, read from
// the environment as cmd/worker reads it; port is the one it listens on.
func networkWorkerEnv(t *testing.T, dataDir string, vars map[string]string) (port string) {
	t.Helper()
	_, port, err := net.SplitHostPort(freeport.MustAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	setEnv(t, map[string]string{
		"LA_DATA_DIR": dataDir, "LA_NATS_LISTEN": "0.0.0.0:" + port, "LA_FILE_ROOTS": absImages(t),
		"LA_METRICS_ADDR": "off", "LA_HTTP_ADDR": "off", "LA_WORKER_NAME": "w1", "LA_POLL_WAIT": "200ms",
	})
	setEnv(t, vars)
	return port
}

// loadWorker reads the worker's configuration from the environment and resolves it.
func loadWorker(t *testing.T) (config.Worker, error) {
	t.Helper()
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, cfg.Finish(t.TempDir())
}

// loadSubmitNATS reads the NATS settings as the submit CLI reads them.
func loadSubmitNATS(t *testing.T, vars map[string]string) natsconn.Config {
	t.Helper()
	for _, k := range []string{"LA_NATS_USER", "LA_NATS_PASSWORD", "LA_NATS_TOKEN", "LA_NATS_TLS_CA",
		"LA_NATS_TLS_CERT", "LA_NATS_TLS_KEY"} {
		t.Setenv(k, "")
	}
	setEnv(t, vars)
	var s config.Submit
	if err := envconfig.Process("", &s); err != nil {
		t.Fatal(err)
	}
	return s.NATS
}

func absImages(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(testImages)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEmbeddedServerOffLoopbackNeedsAuthentication: LA_NATS_LISTEN=0.0.0.0:4222 without
// credentials is refused at start-up, naming what to set; a configuration that slipped
// past the check is refused by the server itself.
func TestEmbeddedServerOffLoopbackNeedsAuthentication(t *testing.T) {
	networkWorkerEnv(t, t.TempDir(), nil)
	_, err := loadWorker(t)
	if err == nil || !strings.Contains(err.Error(), "is not a loopback address") ||
		!strings.Contains(err.Error(), "LA_NATS_USER and LA_NATS_PASSWORD, or LA_NATS_TOKEN") {
		t.Fatalf("LA_NATS_LISTEN=0.0.0.0 without credentials: %v; want a refusal naming the variables", err)
	}
	t.Setenv("LA_NATS_LISTEN", "127.0.0.1:4222")
	cfg := defaultConfig(t)
	cfg.Embedded.Listen, cfg.HTTP.Addr, cfg.Observe.MetricsAddr = "0.0.0.0:"+strings.Split(freeport.MustAddr(t), ":")[1], "off", "off"
	err = Run(t.Context(), cfg, Options{Log: slog.New(slog.DiscardHandler), Open: fixedEngine(enginetest.New())})
	if err == nil || !strings.Contains(err.Error(), "not on the loopback interface") {
		t.Fatalf("Run with an open network listener: %v; want the embedded server to refuse", err)
	}
}

// TestEmbeddedServerAuthenticatesClients: with credentials (and TLS) from the same LA_NATS_*
// settings, the embedded server listens on the network, the worker reaches it, a producer
// with the same settings runs a job, and one without them, or with wrong ones, is refused
// with the variable to check.
func TestEmbeddedServerAuthenticatesClients(t *testing.T) {
	ca := pkitest.NewCA(t, "la-nats")
	serverPair, clientPair := ca.Server(t, "nats"), ca.Client(t, "producer")
	for _, c := range []struct {
		name   string
		worker map[string]string // besides the listen address
		client map[string]string // besides LA_NATS_URL
		wrong  map[string]string
		want   string // what the wrong client's error names
		none   string // what the error of a client without settings names
		scheme string
	}{
		{
			name:   "user and password over TLS",
			worker: map[string]string{"LA_NATS_USER": "la", "LA_NATS_PASSWORD": "pw-Embedded-4451", "LA_NATS_TLS_CERT": serverPair.CertFile, "LA_NATS_TLS_KEY": serverPair.KeyFile},
			client: map[string]string{"LA_NATS_USER": "la", "LA_NATS_PASSWORD": "pw-Embedded-4451", "LA_NATS_TLS_CA": ca.File},
			wrong:  map[string]string{"LA_NATS_USER": "la", "LA_NATS_PASSWORD": "pw-Guessed-0000", "LA_NATS_TLS_CA": ca.File},
			want:   "check LA_NATS_USER and LA_NATS_PASSWORD",
			none:   "set LA_NATS_TLS_CA", // TLS comes first
			scheme: "tls",
		},
		{
			name:   "token",
			worker: map[string]string{"LA_NATS_TOKEN": "tok-Embedded-8812"},
			client: map[string]string{"LA_NATS_TOKEN": "tok-Embedded-8812"},
			wrong:  map[string]string{"LA_NATS_TOKEN": "tok-Guessed-0000"},
			want:   "check LA_NATS_TOKEN",
			none:   "requires authentication: set LA_NATS_CREDS",
			scheme: "nats",
		},
		{
			name:   "mutual TLS",
			worker: map[string]string{"LA_NATS_TLS_CERT": serverPair.CertFile, "LA_NATS_TLS_KEY": serverPair.KeyFile, "LA_NATS_TLS_CA": ca.File},
			client: map[string]string{"LA_NATS_TLS_CA": ca.File, "LA_NATS_TLS_CERT": clientPair.CertFile, "LA_NATS_TLS_KEY": clientPair.KeyFile},
			wrong:  map[string]string{"LA_NATS_TLS_CA": ca.File},
			want:   "set LA_NATS_TLS_CERT and LA_NATS_TLS_KEY",
			none:   "set LA_NATS_TLS_CA",
			scheme: "tls",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			dataDir := t.TempDir()
			port := networkWorkerEnv(t, dataDir, c.worker)
			cfg, err := loadWorker(t)
			if err != nil {
				t.Fatal(err)
			}
			w := startWorker(t, cfg, enginetest.New())
			url := c.scheme + "://127.0.0.1:" + port

			t.Setenv("LA_NATS_URL", url)
			good := loadSubmitNATS(t, c.client)
			js := authPublisher(t, good, w)
			publishJob(t, js, "auth-"+strings.ReplaceAll(c.name, " ", "-"), "dog")
			testwait.Until(t, time.Minute, "the job's result", func() bool {
				r, ok := readResult(t, dataDir, "auth-"+strings.ReplaceAll(c.name, " ", "-"))
				return ok && r.Status == jobs.StatusSucceeded
			})

			for what, vars := range map[string]map[string]string{"wrong": c.wrong, "none": nil} {
				bad := loadSubmitNATS(t, vars)
				bad.Timeout = 5 * time.Second
				nc, err := bad.Connect("", "la-test", nil)
				if err == nil {
					nc.Close()
					t.Fatalf("%s credentials: connected", what)
				}
				want := c.want
				if what == "none" {
					want = c.none
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s credentials: %v; want it to name %q", what, err, want)
				}
				for _, secret := range []string{"pw-Embedded-4451", "pw-Guessed-0000", "tok-Embedded-8812", "tok-Guessed-0000"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("%s credentials: the error quotes a secret: %v", what, err)
					}
				}
			}
		})
	}
}

// authPublisher connects with cfg once the worker's server is up and has its streams.
// When w (nil: a worker the caller watches itself) stops first, it fails at once with
// the worker's error instead of waiting out the minute.
func authPublisher(t *testing.T, cfg natsconn.Config, w *workerRun) jetstream.JetStream {
	t.Helper()
	stopped := func() {
		t.Helper()
		if w == nil {
			return
		}
		if ended, err := w.exited(); ended {
			t.Fatalf("the worker stopped before its consumer existed: %v", err)
		}
	}
	var nc *nats.Conn
	testwait.Until(t, time.Minute, "the worker's NATS server", func() bool {
		stopped()
		var err error
		nc, err = cfg.Connect("", "la-test", nil)
		return err == nil
	})
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the worker's consumer", func() bool {
		stopped()
		_, err := js.Consumer(context.Background(), jobs.JobsStream, jobs.ConsumerName)
		return err == nil
	})
	return js
}

// TestWorkerAgainstSecuredServers: a worker configured from LA_NATS_* reaches an external
// server that wants a .creds file, an NKey, or a password over mutual TLS, and runs a job.
func TestWorkerAgainstSecuredServers(t *testing.T) {
	ca := pkitest.NewCA(t, "la-nats")
	nkeyPub, nkeySeed := natstest.NKeyUser(t)
	op := natstest.NewOperator(t)
	client := ca.Client(t, "worker")
	withJetStream := func(configure func(*server.Options)) func(*server.Options) {
		return func(o *server.Options) { o.JetStream = true; configure(o) }
	}
	for _, c := range []struct {
		name string
		url  string
		vars map[string]string
	}{
		{"creds", natstest.StartServer(t, withJetStream(op.Configure(t))).ClientURL(),
			map[string]string{"LA_NATS_CREDS": op.Creds(t, "worker", time.Time{})}},
		{"nkey", natstest.StartServer(t, withJetStream(func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: nkeyPub}} })).ClientURL(),
			map[string]string{"LA_NATS_NKEY_FILE": nkeySeed}},
		{"password over mutual TLS", natstest.StartWith(t, natsembed.Options{User: "la", Password: "pw-External-3390",
			TLS: pkitest.ServerTLS(t, ca.Server(t, "nats"), ca)}).ClientURL(),
			map[string]string{"LA_NATS_USER": "la", "LA_NATS_PASSWORD": "pw-External-3390", "LA_NATS_TLS_CA": ca.File,
				"LA_NATS_TLS_CERT": client.CertFile, "LA_NATS_TLS_KEY": client.KeyFile}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dataDir := t.TempDir()
			vars := map[string]string{"LA_NATS_URL": c.url} // LA_NATS_LISTEN is then unused
			for k, v := range c.vars {
				vars[k] = v
			}
			networkWorkerEnv(t, dataDir, vars)
			cfg, err := loadWorker(t)
			if err != nil {
				t.Fatal(err)
			}
			w := startWorker(t, cfg, enginetest.New())
			js := authPublisher(t, loadSubmitNATS(t, c.vars), w)
			id := "external-" + strings.ReplaceAll(c.name, " ", "-")
			publishJob(t, js, id, "dog")
			testwait.Until(t, time.Minute, "the job's result", func() bool {
				r, ok := readResult(t, dataDir, id)
				return ok && r.Status == jobs.StatusSucceeded
			})
		})
	}
}
