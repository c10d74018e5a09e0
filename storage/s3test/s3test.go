// Package s3test runs a real S3-compatible server (versitygw with its posix backend) for
// tests in any package that talks to S3.
//
//	srv := s3test.Start(t)
//	srv.CreateBucket(t, "images")
//	// point the code under test at srv.Endpoint with srv.AccessKey / srv.SecretKey
//
// The binary is found through $VERSITYGW, then versitygw on PATH, then $GOPATH/bin and
// ~/go/bin (where go install puts it). When it is missing the test fails with the install command.
// Each server gets its own data directory (t.TempDir), a free 127.0.0.1 port and random
// root credentials, and is stopped in t.Cleanup. StartWith serves HTTPS with a given
// certificate, for tests of TLS with a private CA (LA_S3_CA_FILE).
package s3test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/internal/syncbuf"
	"github.com/locateanything/detect/internal/tiedproc"
)

// InstallCommand is the command that builds the server binary these tests run.
const InstallCommand = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// Region is the region the server answers for.
const Region = "us-east-1"

const (
	startTimeout = 30 * time.Second // first start of the binary on a loaded 2-core machine
	stopTimeout  = 10 * time.Second // graceful shutdown before the process is killed
	startTries   = 3                // fresh ports tried when another process takes ours first
)

// Options configure a server beyond the defaults.
type Options struct {
	// CertFile and KeyFile, when set, make the server speak HTTPS with that certificate
	// (PEM files); CAFile is the CA that signs it, which the harness's own clients trust.
	CertFile, KeyFile, CAFile string
}

// Server is one running versitygw.
type Server struct {
	// Endpoint is host:port (no scheme) as minio-go wants it.
	Endpoint string
	// AccessKey and SecretKey are the root credentials, random for every server.
	AccessKey, SecretKey string
	// Secure is true when the server speaks HTTPS (StartWith with a certificate), false for
	// plain HTTP.
	Secure bool

	t       testing.TB // the test that started it; Restart reports through it
	bin     string
	dataDir string
	opts    Options
	roots   *x509.CertPool // what the harness's clients trust; nil over plain HTTP

	mu   sync.Mutex
	proc *process // nil while stopped
}

// process is one run of the binary: the command and a channel closed when it has exited.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // set before exited is closed
	output *syncbuf.Buffer
}

// Start starts a plain-HTTP server for the test and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith starts a server configured by o for the test and stops it when the test ends.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := findBinary()
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	s := &Server{
		AccessKey: randomKey(t, 10),
		SecretKey: randomKey(t, 20),
		Secure:    o.CertFile != "",
		t:         t,
		bin:       bin,
		dataDir:   t.TempDir(),
		opts:      o,
	}
	if (o.CertFile == "") != (o.KeyFile == "") || (o.CertFile != "" && o.CAFile == "") {
		t.Fatal("s3test: HTTPS needs CertFile, KeyFile and the CAFile that signs them")
	}
	if s.Secure {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		s.roots = x509.NewCertPool()
		if !s.roots.AppendCertsFromPEM(pem) {
			t.Fatalf("s3test: no certificate in %s", o.CAFile)
		}
	}
	t.Cleanup(s.Stop)

	var lastErr error
	for range startTries {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		s.Endpoint = addr
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("s3test: start versitygw: %v", lastErr)
	return nil
}

// URL is the endpoint with its scheme, for clients that want one.
func (s *Server) URL() string {
	if s.Secure {
		return "https://" + s.Endpoint
	}
	return "http://" + s.Endpoint
}

// Client returns a minio-go client for the server with root credentials (trusting the
// server's CA over HTTPS).
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := s.client(0)
	if err != nil {
		t.Fatalf("s3test: client: %v", err)
	}
	return c
}

// client is a root client; maxRetries 0 keeps minio-go's default.
func (s *Server) client(maxRetries int) (*minio.Client, error) {
	transport, err := minio.DefaultTransport(s.Secure)
	if err != nil {
		return nil, err
	}
	if s.Secure {
		transport.TLSClientConfig.RootCAs = s.roots
	}
	return minio.New(s.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure:     s.Secure,
		Transport:  transport,
		Region:     Region,
		MaxRetries: maxRetries,
	})
}

// CreateBucket creates a bucket through the S3 API.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.Client(t).MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("s3test: create bucket %q: %v", name, err)
	}
}

// Stop stops the server: SIGTERM, then SIGKILL if it has not exited in time. Data stays on
// disk for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	p := s.proc
	s.proc = nil
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Restart stops the server if it runs and starts it again on the same port with the same
// data and credentials, as an S3 service that went away mid-run and came back. It fails
// the test that started the server when the server does not come back; call it from that
// test's goroutine.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	// The port was ours a moment ago; another process taking it in between is rare, and
	// then the test fails with the reason rather than silently moving the endpoint.
	if err := s.start(); err != nil {
		s.t.Fatalf("s3test: restart versitygw on %s: %v", s.Endpoint, err)
	}
}

// start runs the binary on s.Endpoint and waits until it serves this server's credentials.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("already running")
	}
	out := &syncbuf.Buffer{}
	args := []string{"--port", s.Endpoint, "--region", Region, "--quiet"}
	if s.Secure {
		args = append(args, "--cert", s.opts.CertFile, "--key", s.opts.KeyFile)
	}
	cmd := exec.Command(s.bin, append(args, "posix", s.dataDir)...)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	cmd.Stdout = out
	cmd.Stderr = out
	// Tied to this process: a test binary killed by -timeout leaves no server behind,
	// and no other code's thread ending kills it early.
	waited, err := tiedproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("run %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), output: out}
	go func() {
		p.err = <-waited
		close(p.exited)
	}()

	if err := s.waitReady(p); err != nil {
		_ = cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%w; output:\n%s", err, out.String())
	}
	s.proc = p
	return nil
}

// waitReady polls until the server on addr accepts this process's credentials, the process
// exits, or startTimeout passes. An authenticated request, not just any answer, proves the
// server is ours: between freeport.Addr and our bind another test's server may take the port.
func (s *Server) waitReady(p *process) error {
	client, err := s.client(1)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.ListBuckets(ctx)
		cancel()
		select {
		case <-p.exited:
			return fmt.Errorf("versitygw exited before serving: %v", p.err)
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer on %s within %s: %w", s.Endpoint, startTimeout, err)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("versitygw exited before serving: %v", p.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// findBinary locates versitygw: $VERSITYGW, PATH, then the default go install location.
func findBinary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("VERSITYGW=%s: %w", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var candidates []string
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		candidates = append(candidates, filepath.Join(gopath, "bin", "versitygw"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, "go", "bin", "versitygw"))
	}
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("versitygw not found ($VERSITYGW, PATH, $GOPATH/bin, ~/go/bin); install it with: %s", InstallCommand)
}

func randomKey(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("s3test: random key: %v", err)
	}
	return hex.EncodeToString(b)
}
