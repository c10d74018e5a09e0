// Package producer holds the example producer la_producer.py (README.md) and its test:
// the script, run by Debian's /usr/bin/python3, against a real worker.
package producer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/config"
	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/jsonschema"
	"github.com/locateanything/detect/internal/pkitest"
	"github.com/locateanything/detect/internal/testwait"
	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/worker"
)

// python is the interpreter the example is written for: Debian's, standard library only
// (make test installs the python3 package).
const python = "/usr/bin/python3"

// scenes are shape pictures the bundled model was not trained on.
const scenes = "../../tools/tinymodel/testdata/heldout"

// TestPythonProducerRoundTripsAJob starts the real worker (embedded NATS, the CPU engine
// on the bundled tiny-shapes model, results as files) and runs la_producer.py against it:
// the job it publishes is a valid job of the schema with its id as Nats-Msg-Id, and the
// result it prints is the worker's, succeeded, for that id, matching the result schema.
// Run again, the same command is deduplicated by JetStream (PubAck "duplicate"): nothing
// is queued or run a second time, and the script still prints the stored result. A job
// for a missing image ends failed, exit status 3.
func TestPythonProducerRoundTripsAJob(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s: %v (make test installs Debian's python3)", python, err)
	}
	addr, dataDir := startWorker(t, nil)
	nc, js := connect(t, "nats://"+addr)
	sent, err := nc.SubscribeSync(jobs.JobSubjectPrefix + ">") // sees what the script publishes
	if err != nil {
		t.Fatal(err)
	}
	jobSchema, resultSchema := loadSchema(t, "job.schema.json"), loadSchema(t, "result.schema.json")

	image, err := filepath.Abs(filepath.Join(scenes, "00.png"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--image", "file://" + image, "--query", "purple shape", "--batch", "py-e2e",
		"--metadata", `{"camera": "04"}`, "--overlay"}
	out, stderr, code := runProducer(t, addr, args...)
	if code != 0 {
		t.Fatalf("la_producer exited %d; stderr:\n%s", code, stderr)
	}

	// What went on the wire: a job of the schema, with its id as Nats-Msg-Id.
	msg, err := sent.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no job seen on %s>: %v", jobs.JobSubjectPrefix, err)
	}
	if err := jobSchema.Validate(msg.Data); err != nil {
		t.Errorf("the published job does not match the job schema: %v\n%s", err, msg.Data)
	}
	job, err := jobs.DecodeJob(msg.Data)
	if err != nil {
		t.Fatalf("the published job is refused by the worker's decoder: %v\n%s", err, msg.Data)
	}
	if msg.Subject != jobs.JobSubject(jobs.DefaultClass) || msg.Header.Get(nats.MsgIdHdr) != job.ID {
		t.Errorf("job published on %s with Nats-Msg-Id %q; want %s and its id %q",
			msg.Subject, msg.Header.Get(nats.MsgIdHdr), jobs.JobSubject(jobs.DefaultClass), job.ID)
	}

	// What came back: the worker's stored result for that job, succeeded.
	if err := resultSchema.Validate(out); err != nil {
		t.Errorf("the printed result does not match the result schema: %v\n%s", err, out)
	}
	first := decodeResult(t, out)
	if first.ID != job.ID || first.Status != jobs.StatusSucceeded || first.Batch != "py-e2e" || first.Model != "tiny-shapes" {
		t.Fatalf("result: id %q status %s (error %+v) batch %q model %q; want %q succeeded in py-e2e by tiny-shapes",
			first.ID, first.Status, first.Error, first.Batch, first.Model, job.ID)
	}
	if len(first.Detections) == 0 || first.Detections[0].Label != "purple shape" || first.OverlayURL == nil ||
		string(first.Metadata) != `{"camera":"04"}` {
		t.Errorf("result does not answer the job: detections %+v, overlay %v, metadata %s", first.Detections, first.OverlayURL, first.Metadata)
	}
	stored, err := os.ReadFile(filepath.Join(dataDir, "results", job.ID+".json"))
	if err != nil {
		t.Fatalf("the worker stored no result for %s: %v", job.ID, err)
	}
	if s := decodeResult(t, stored); !s.FinishedAt.Equal(first.FinishedAt) || s.RawText != first.RawText {
		t.Errorf("printed result (finished %s) is not the stored one (finished %s)", first.FinishedAt, s.FinishedAt)
	}
	if !strings.Contains(stderr, "published job "+job.ID) {
		t.Errorf("stderr does not report the publish:\n%s", stderr)
	}

	// The same command again: the same id, deduplicated; the stored result is printed.
	out, stderr, code = runProducer(t, addr, args...)
	if code != 0 {
		t.Fatalf("second run exited %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "job "+job.ID+" was already published") {
		t.Errorf("second run does not report the duplicate:\n%s", stderr)
	}
	if again := decodeResult(t, out); again.ID != job.ID || !again.FinishedAt.Equal(first.FinishedAt) || again.Attempt != first.Attempt {
		t.Errorf("second run printed %s finished %s attempt %d; want the first result (finished %s, attempt %d)",
			again.ID, again.FinishedAt, again.Attempt, first.FinishedAt, first.Attempt)
	}
	jobsInfo, err := js.Stream(t.Context(), jobs.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	if last := jobsInfo.CachedInfo().State.LastSeq; last != 1 {
		t.Errorf("%s stored %d messages; the duplicate publish must not be stored", jobs.JobsStream, last)
	}
	subject := jobs.ResultSubject("py-e2e", job.ID)
	results, err := js.Stream(t.Context(), jobs.ResultsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := results.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subject]; n != 1 {
		t.Errorf("%d results on %s; the job must have run once", n, subject)
	}

	// A job that fails: the failed result is printed, and the exit status says so.
	missing := filepath.Join(filepath.Dir(image), "no-such-scene.png")
	out, stderr, code = runProducer(t, addr, "--image", "file://"+missing, "--query", "red circle", "--id", "py-e2e-missing")
	if code != 3 {
		t.Fatalf("a failed job exited %d, want 3; stderr:\n%s", code, stderr)
	}
	if err := resultSchema.Validate(out); err != nil {
		t.Errorf("the failed result does not match the result schema: %v\n%s", err, out)
	}
	if r := decodeResult(t, out); r.ID != "py-e2e-missing" || r.Status != jobs.StatusFailed || r.Error == nil || r.Error.Code != jobs.CodeNotFound {
		t.Errorf("missing image: id %q status %s error %+v; want py-e2e-missing failed with %s", r.ID, r.Status, r.Error, jobs.CodeNotFound)
	}
}

// TestPythonProducerOverTLSWithAPassword: against a NATS server that requires TLS and a
// user and password, the script upgrades the connection, authenticates from the URL and
// round-trips a job; with a wrong password it fails with the server's refusal.
func TestPythonProducerOverTLSWithAPassword(t *testing.T) {
	ca := pkitest.NewCA(t, "la-nats")
	server := ca.Server(t, "nats")
	addr, _ := startWorker(t, map[string]string{
		"LA_NATS_USER": "la", "LA_NATS_PASSWORD": "pw-Producer-7731",
		"LA_NATS_TLS_CERT": server.CertFile, "LA_NATS_TLS_KEY": server.KeyFile,
	})
	image, err := filepath.Abs(filepath.Join(scenes, "03.png"))
	if err != nil {
		t.Fatal(err)
	}
	connect(t, "tls://"+addr, nats.UserInfo("la", "pw-Producer-7731"), nats.RootCAs(ca.File))

	out, stderr, code := runProducerAt(t, "tls://la:pw-Producer-7731@"+addr, "--tls-ca", ca.File,
		"--image", "file://"+image, "--query", "blue square", "--id", "py-tls")
	if code != 0 {
		t.Fatalf("over TLS: exit %d; stderr:\n%s", code, stderr)
	}
	if r := decodeResult(t, out); r.ID != "py-tls" || r.Status != jobs.StatusSucceeded {
		t.Fatalf("over TLS: id %q status %s; stderr:\n%s", r.ID, r.Status, stderr)
	}

	out, stderr, code = runProducerAt(t, "tls://la:pw-Guessed-0000@"+addr, "--tls-ca", ca.File,
		"--image", "file://"+image, "--query", "blue square", "--id", "py-tls-wrong")
	if code != 1 || len(out) != 0 || !strings.Contains(stderr, "Authorization Violation") {
		t.Errorf("wrong password: exit %d, stdout %q, stderr:\n%s\nwant exit 1 with the server's Authorization Violation", code, out, stderr)
	}
}

// startWorker runs the worker on the embedded single-machine default, with its NATS on a
// free port, its data in a temporary directory, the bundled model, and the shape scenes
// readable as file:// images, and the settings in extra; it stops when the test ends.
func startWorker(t *testing.T, extra map[string]string) (natsAddr, dataDir string) {
	t.Helper()
	natsAddr, dataDir = freeport.MustAddr(t), t.TempDir()
	roots, err := filepath.Abs(scenes)
	if err != nil {
		t.Fatal(err)
	}
	model, err := filepath.Abs("../../models/tiny-shapes")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"LA_DATA_DIR": dataDir, "LA_NATS_LISTEN": natsAddr, "LA_FILE_ROOTS": roots, "LA_WEIGHTS_DIR": model,
		"LA_HTTP_ADDR": "off", "LA_METRICS_ADDR": "off", "LA_WORKER_NAME": "py-e2e", "LA_THREADS": "1",
		"LA_POLL_WAIT": "200ms",
	} {
		t.Setenv(k, v)
	}
	for k, v := range extra {
		t.Setenv(k, v)
	}
	var cfg config.Worker
	if err := envconfig.Process("", &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- worker.Run(ctx, cfg, worker.Options{Log: log, Open: worker.OpenEngine}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	return natsAddr, dataDir
}

// connect waits until the worker's NATS is up with its streams and consumer: what a
// producer needs before it publishes.
func connect(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var nc *nats.Conn
	testwait.Until(t, time.Minute, "the worker's NATS server", func() bool {
		var err error
		nc, err = nats.Connect(url, opts...)
		return err == nil
	})
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the worker's streams and consumer", func() bool {
		for _, stream := range []string{jobs.JobsStream, jobs.ResultsStream} {
			if _, err := js.Stream(t.Context(), stream); err != nil {
				return false
			}
		}
		_, err := js.Consumer(t.Context(), jobs.JobsStream, jobs.ConsumerName)
		return err == nil
	})
	return nc, js
}

// runProducer runs la_producer.py against the NATS server at addr and returns its stdout,
// stderr and exit status.
func runProducer(t *testing.T, addr string, args ...string) (stdout []byte, stderr string, code int) {
	t.Helper()
	return runProducerAt(t, "nats://"+addr, args...)
}

// runProducerAt is runProducer with a whole server URL.
func runProducerAt(t *testing.T, url string, args ...string) (stdout []byte, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"la_producer.py", "--server", url, "--timeout", "60"}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run la_producer.py: %v", err)
	}
	return out.Bytes(), errOut.String(), code
}

func decodeResult(t *testing.T, data []byte) jobs.Result {
	t.Helper()
	var r jobs.Result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("not a result: %v\n%s", err, data)
	}
	return r
}

func loadSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../../jobs/schema", name))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jsonschema.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}
