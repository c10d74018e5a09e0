//go:build linux

package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// The binaries every scenario runs, built once by TestMain from this checkout (the worker)
// and from the module cache (nats-server, the version go.mod pins); versitygw is the one
// `make deps` installs (storage/s3test.InstallCommand).
var (
	workerBin    string
	natsBin      string
	versitygwBin string
	versitygwErr error

	repoRoot   string // the checkout
	tinyModel  string // models/tiny-shapes, the bundled model every worker here runs
	heldoutPNG string // tools/tinymodel/testdata/heldout: the shape scenes jobs point at
	photoJPG   string // testdata/images/person.jpg: a photograph, slow at a large patch budget
)

// form is the size of every scenario: the bounded form runs with `go test ./...` and must
// stay within a few minutes on a 2-core machine; the full form (CHAOS_FULL=1, `make
// chaos`) runs more jobs, more faults and longer outages.
type form struct {
	name      string
	jobs      int           // jobs per fault scenario
	kills     int           // worker kills in the kill -9 scenarios
	natsDown  time.Duration // how long a killed nats-server stays down
	s3Down    time.Duration // how long the S3 server stays stopped
	s3Freeze  time.Duration // how long the S3 server stays frozen (SIGSTOP)
	predictN  int           // /predict requests per concurrent client
	slowConns int           // slow-body and slow-header clients at once
	bigBody   int64         // bytes of the oversized /predict body
}

var (
	bounded = form{name: "bounded", jobs: 60, kills: 1, natsDown: 2 * time.Second,
		s3Down: 2 * time.Second, s3Freeze: 5 * time.Second, predictN: 1, slowConns: 4, bigBody: 200 << 20}
	full = form{name: "full", jobs: 400, kills: 3, natsDown: 10 * time.Second,
		s3Down: 10 * time.Second, s3Freeze: 20 * time.Second, predictN: 6, slowConns: 20, bigBody: 200 << 20}
	size = bounded
)

// fullForm reports whether CHAOS_FULL asks for the full form.
func fullForm() bool { return os.Getenv("CHAOS_FULL") == "1" }

func TestMain(m *testing.M) {
	flag.Parse()
	if fullForm() {
		size = full
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		fmt.Println("chaos: skipped in -short mode (the suite starts real servers)")
		return 0
	}
	var err error
	if repoRoot, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	tinyModel = filepath.Join(repoRoot, "models", "tiny-shapes")
	heldoutPNG = filepath.Join(repoRoot, "tools", "tinymodel", "testdata", "heldout")
	photoJPG = filepath.Join(repoRoot, "testdata", "images", "person.jpg")
	dir, err := os.MkdirTemp("", "la-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	workerBin = filepath.Join(dir, "worker")
	natsBin = filepath.Join(dir, "nats-server")
	builds := []struct{ out, pkg string }{
		{workerBin, "./cmd/worker"},
		{natsBin, "github.com/nats-io/nats-server/v2"}, // the version go.mod pins, from the module cache
	}
	if bin := os.Getenv("CHAOS_WORKER_BIN"); bin != "" { // a worker built elsewhere (a release)
		workerBin, builds = bin, builds[1:]
	}
	for _, b := range builds {
		if err := goBuild(b.out, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
	}
	versitygwBin, versitygwErr = findVersitygw()
	fmt.Printf("chaos: %s form (CHAOS_FULL=1 for the full one)\n", size.name)
	return m.Run()
}

// goBuild builds pkg from the checkout into out, without the race detector: the suite
// tests the binary as it ships.
func goBuild(out, pkg string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", out, pkg)
	cmd.Dir = repoRoot
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -o %s %s: %v\n%s", out, pkg, err, b)
	}
	fmt.Printf("chaos: built %s in %.1fs\n", pkg, time.Since(start).Seconds())
	return nil
}
