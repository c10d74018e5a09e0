//go:build linux

package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/internal/freeport"
	"github.com/locateanything/detect/storage/s3test"
)

// natsNode is one external nats-server process with JetStream, alone or a cluster node,
// configured by a file the test writes. It keeps its ports and store across restarts.
type natsNode struct {
	name   string
	client string // host:port of the client listener
	route  string // host:port of the cluster listener; "" when alone
	dir    string // store and config
	conf   string
	ps     *procs
	proc   *proc
}

func (n *natsNode) url() string { return "nats://" + n.client }

// startNATS runs one nats-server with JetStream until the test ends.
func startNATS(t testing.TB, ps *procs, dir string) *natsNode {
	t.Helper()
	n := &natsNode{name: "nats", client: freeport.MustAddr(t), dir: mkdir(t, dir, "nats"), ps: ps}
	n.writeConfig(t, "", nil)
	n.start(t)
	waitJetStream(t, n.url())
	return n
}

// startCluster runs a JetStream cluster of size nodes (n1, n2, ...) and waits until it
// has elected a meta leader.
func startCluster(t testing.TB, ps *procs, dir string, size int) []*natsNode {
	t.Helper()
	nodes := make([]*natsNode, size)
	routes := make([]string, size)
	for i := range nodes {
		nodes[i] = &natsNode{name: fmt.Sprintf("n%d", i+1), client: freeport.MustAddr(t), route: freeport.MustAddr(t),
			dir: mkdir(t, dir, fmt.Sprintf("n%d", i+1)), ps: ps}
		routes[i] = "nats-route://" + nodes[i].route
	}
	for _, n := range nodes {
		n.writeConfig(t, "chaos", routes)
		n.start(t)
	}
	waitJetStream(t, clusterURLs(nodes))
	return nodes
}

func clusterURLs(nodes []*natsNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

func (n *natsNode) writeConfig(t testing.TB, cluster string, routes []string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\nlisten: %q\n", n.name, n.client)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", filepath.Join(n.dir, "store"))
	if cluster != "" {
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: %q\n  routes: [\n", cluster, n.route)
		for _, r := range routes {
			fmt.Fprintf(&b, "    %q\n", r)
		}
		b.WriteString("  ]\n}\n")
	}
	n.conf = filepath.Join(n.dir, "nats.conf")
	if err := os.WriteFile(n.conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs the server and waits until its client port accepts connections.
func (n *natsNode) start(t testing.TB) {
	t.Helper()
	p, err := startProc(t, "nats-server "+n.name, n.dir, filepath.Join(n.dir, "nats.log"), baseEnv(n.dir), natsBin, "-c", n.conf)
	if err != nil {
		t.Fatal(err)
	}
	n.ps.add(p)
	n.proc = p
	deadline := time.Now().Add(time.Minute)
	for {
		nc, err := nats.Connect(n.url(), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return
		}
		if !p.alive() || time.Now().After(deadline) {
			t.Fatalf("nats-server %s not serving on %s: %v; log:\n%s", n.name, n.client, err, tail(p.logPath, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill9 kills the server with SIGKILL: no flush, no goodbye to its peers.
func (n *natsNode) kill9(t testing.TB) {
	t.Helper()
	t.Logf("kill -9 nats-server %s (pid %d)", n.name, n.proc.pid())
	n.proc.kill9(t)
}

// waitJetStream waits until JetStream answers through urls (in a cluster: a meta leader).
func waitJetStream(t testing.TB, urls string) {
	t.Helper()
	nc, err := nats.Connect(urls, nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("connect to %s: %v", urls, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream at %s not ready: %v", urls, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// s3Server is versitygw (posix backend) as a process of the test's own, so a scenario can
// kill it, restart it on the same port with the same data, and freeze it with SIGSTOP
// (storage/s3test.Server does not expose its process).
type s3Server struct {
	endpoint       string // host:port, plain HTTP
	access, secret string
	dir            string
	ps             *procs
	proc           *proc
}

// startS3 runs versitygw on a free port with random root credentials and makes buckets.
func startS3(t testing.TB, ps *procs, dir string, buckets ...string) *s3Server {
	t.Helper()
	if versitygwErr != nil {
		t.Fatalf("versitygw: %v (make deps installs it: %s)", versitygwErr, s3test.InstallCommand)
	}
	s := &s3Server{endpoint: freeport.MustAddr(t), access: randomHex(t, 10), secret: randomHex(t, 20),
		dir: mkdir(t, dir, "s3"), ps: ps}
	mkdir(t, s.dir, "data")
	s.start(t)
	for _, b := range buckets {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.client(t).MakeBucket(ctx, b, minio.MakeBucketOptions{Region: s3test.Region})
		cancel()
		if err != nil {
			t.Fatalf("make bucket %s: %v", b, err)
		}
	}
	return s
}

func (s *s3Server) start(t testing.TB) {
	t.Helper()
	env := append(baseEnv(s.dir), "ROOT_ACCESS_KEY="+s.access, "ROOT_SECRET_KEY="+s.secret)
	p, err := startProc(t, "versitygw", s.dir, filepath.Join(s.dir, "versitygw.log"), env, versitygwBin,
		"--port", s.endpoint, "--region", s3test.Region, "--quiet", "posix", filepath.Join(s.dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	s.ps.add(p)
	s.proc = p
	c := s.client(t)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ListBuckets(ctx)
		cancel()
		if err == nil {
			return
		}
		if !p.alive() || time.Now().After(deadline) {
			t.Fatalf("versitygw not serving on %s: %v; log:\n%s", s.endpoint, err, tail(p.logPath, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client is a minio-go client with the root credentials.
func (s *s3Server) client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(s.endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(s.access, s.secret, ""), Region: s3test.Region, MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// workerEnv is the worker's configuration for this server.
func (s *s3Server) workerEnv(env map[string]string) {
	env["LA_S3_ENDPOINT"] = "http://" + s.endpoint
	env["LA_S3_ACCESS_KEY"] = s.access
	env["LA_S3_SECRET_KEY"] = s.secret
	env["LA_S3_PATH_STYLE"] = "true"
	env["LA_S3_REGION"] = s3test.Region
}

// put stores data at bucket/key.
func (s *s3Server) put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.client(t).PutObject(ctx, bucket, key, strings.NewReader(string(data)), int64(len(data)), minio.PutObjectOptions{})
	if err != nil {
		t.Fatalf("put s3://%s/%s: %v", bucket, key, err)
	}
}

// get reads bucket/key; a missing object is os.ErrNotExist.
func (s *s3Server) get(ctx context.Context, c *minio.Client, bucket, key string) ([]byte, error) {
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, os.ErrNotExist
		}
		return nil, err
	}
	return b, nil
}

// kill9 kills the server: clients get connection refused until restart.
func (s *s3Server) kill9(t testing.TB) {
	t.Helper()
	t.Logf("kill -9 versitygw (pid %d)", s.proc.pid())
	s.proc.kill9(t)
}

// freeze stops the process with SIGSTOP: connections are accepted by the kernel and then
// nothing answers, the worst kind of outage for a client.
func (s *s3Server) freeze(t testing.TB) {
	t.Helper()
	t.Logf("SIGSTOP versitygw (pid %d)", s.proc.pid())
	s.proc.signal(syscall.SIGSTOP)
}

func (s *s3Server) thaw(t testing.TB) {
	t.Helper()
	t.Logf("SIGCONT versitygw (pid %d)", s.proc.pid())
	s.proc.signal(syscall.SIGCONT)
}

// findVersitygw locates the S3 server binary the way storage/s3test does: $VERSITYGW,
// PATH, then the go install locations.
func findVersitygw() (string, error) {
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
	return "", errors.New("not found ($VERSITYGW, PATH, $GOPATH/bin, ~/go/bin)")
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
