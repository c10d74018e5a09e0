package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lmittmann/tint"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/engine/enginetest"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/syncbuf"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
	"github.com/locateanything/detect/storage/s3test"
)

// Distinctive secrets: none may appear in anything the worker says.
const (
	natsPassword = "pw-NATS-Secret-Q7x2"
	natsToken    = "tok-NATS-Secret-K9m4"
	s3AccessKey  = "AKIA-S3-Secret-Z3v8"
	s3SecretKey  = "sk-S3-Secret-W5n1"
	hfToken      = "hf_HF-Secret-J2p6"
	wrongSecret  = "pw-Wrong-Secret-B8c3"
	opsPassword  = "pw-Operator-Secret-T4r9"
)

var allSecrets = []string{natsPassword, natsToken, s3AccessKey, s3SecretKey, hfToken, wrongSecret, opsPassword}

// TestSecretsNeverLeave starts the worker with every secret set, against an external NATS
// server and on the embedded one, runs a job whose image the S3 service refuses (the
// keys are not its keys), reads /info, the configuration listing and the error of a
// refused NATS connection, and greps all of it, and everything logged at debug level in
// JSON and text, for the secrets.
func TestSecretsNeverLeave(t *testing.T) {
	srv := s3test.Start(t) // its own keys, not the worker's: every request is refused
	srv.CreateBucket(t, "images")
	for _, scenario := range []string{"external", "embedded"} {
		t.Run(scenario, func(t *testing.T) {
			vars := map[string]string{
				"LA_DATA_DIR": t.TempDir(), "LA_FILE_ROOTS": absImages(t), "LA_WORKER_NAME": "w1",
				"LA_HTTP_ADDR": "127.0.0.1:0", "LA_METRICS_ADDR": "127.0.0.1:0", "LA_POLL_WAIT": "200ms",
				"LA_NATS_USER": "la", "LA_NATS_PASSWORD": natsPassword,
				"LA_S3_ENDPOINT": srv.Endpoint, "LA_S3_SECURE": "false", "LA_S3_PATH_STYLE": "true",
				"LA_S3_ACCESS_KEY": s3AccessKey, "LA_S3_SECRET_KEY": s3SecretKey,
				"HF_TOKEN": hfToken, "HF_HOME": t.TempDir(),
			}
			var producer map[string]string
			if scenario == "external" {
				// The server takes the token; the user and password go along unused.
				nats := natstest.StartWith(t, natsembed.Options{Token: natsToken})
				vars["LA_NATS_URL"], vars["LA_NATS_TOKEN"] = nats.ClientURL(), natsToken
				producer = map[string]string{"LA_NATS_TOKEN": natsToken}
			} else {
				addr := freeport.MustAddr(t)
				_, port, _ := net.SplitHostPort(addr)
				vars["LA_NATS_LISTEN"] = "0.0.0.0:" + port
				vars["LA_NATS_URL"] = ""
				vars["LA_NATS_OPERATOR_USER"], vars["LA_NATS_OPERATOR_PASSWORD"] = "ops", opsPassword
				producer = map[string]string{"LA_NATS_URL": "nats://" + addr, "LA_NATS_USER": "la", "LA_NATS_PASSWORD": natsPassword}
			}
			setEnv(t, vars)
			cfg, err := loadWorker(t)
			if err != nil {
				t.Fatal(err)
			}
			said := &bytes.Buffer{}
			logs := runAndProbe(t, cfg, producer, said)

			var listing bytes.Buffer
			if err := config.Print(&listing, config.Settings(cfg, os.Environ())); err != nil {
				t.Fatal(err)
			}
			said.Write(listing.Bytes())
			if scenario == "external" {
				// A refused connection: the server's token is not this one.
				wrong := cfg
				wrong.NATS.Token, wrong.HTTP.Addr, wrong.Observe.MetricsAddr = wrongSecret, "off", "off"
				wrongLog := &syncbuf.Buffer{}
				err := Run(t.Context(), wrong, Options{Log: bothFormats(wrongLog), Open: fixedEngine(enginetest.New())})
				if err == nil || !strings.Contains(err.Error(), "check LA_NATS_USER and LA_NATS_PASSWORD, LA_NATS_TOKEN") {
					t.Errorf("a worker with a wrong token: %v; want a refusal naming the variables", err)
				}
				said.WriteString(errString(err) + "\n" + wrongLog.String())
			}
			all := logs + said.String()
			for _, secret := range allSecrets {
				if i := strings.Index(all, secret); i >= 0 {
					t.Errorf("secret %q appears in what the worker said: ...%s...", secret, all[max(0, i-200):min(len(all), i+60)])
				}
			}
		})
	}
}

// runAndProbe runs the worker on cfg, publishes a job through a producer configured by
// the producer variables (as submit reads them) whose image S3 refuses, waits until the
// worker has logged the failure, reads /info into said, and stops it. It returns the logs.
func runAndProbe(t *testing.T, cfg config.Worker, producer map[string]string, said *bytes.Buffer) string {
	t.Helper()
	logged := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Options{Log: bothFormats(logged), Open: fixedEngine(enginetest.New())}) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		}
	}
	defer stop()
	testwait.Until(t, time.Minute, "the worker's start", func() bool {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("the worker did not start: %v", err)
		default:
		}
		return strings.Contains(logged.String(), "worker started")
	})

	js := authPublisher(t, loadSubmitNATS(t, producer), nil) // the start is watched above
	b, _ := json.Marshal(jobs.Job{ID: "s3-refused", Image: "s3://images/dog.jpg", Query: "dog"})
	if _, err := js.Publish(t.Context(), jobs.JobSubject(jobs.DefaultClass), b); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("the worker logged:\n%s", logged.String())
		}
	}()
	testwait.Until(t, time.Minute, "the S3 failure in the log", func() bool {
		// versitygw answers an unknown access key with XAdminUserNotFound.
		return strings.Contains(logged.String(), "will retry") && strings.Contains(logged.String(), "XAdminUserNotFound")
	})

	addr := predictAddr(t, logged.String())
	resp, err := http.Get("http://" + addr + "/info")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"queue"`) {
		t.Errorf("/info: %d %s", resp.StatusCode, body)
	}
	said.Write(body)
	stop()
	for _, want := range []string{"worker started", "/predict served", `"level":"WARN"`, "WRN job failed"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the logs lack %q: the grep for secrets would prove little", want)
		}
	}
	return logged.String()
}

// bothFormats logs at debug level to w twice: as JSON and as the text cmd/worker writes.
func bothFormats(w io.Writer) *slog.Logger {
	return slog.New(slog.NewMultiHandler(
		slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}),
		tint.NewHandler(w, &tint.Options{Level: slog.LevelDebug, NoColor: true}),
	))
}

// predictAddr finds the /predict server's address in the JSON log.
func predictAddr(t *testing.T, logs string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "/predict served" {
			return rec.Addr
		}
	}
	t.Fatal("no /predict served line in the log")
	return ""
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
