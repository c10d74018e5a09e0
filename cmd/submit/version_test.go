package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestVersionFromTheMakefile builds submit the way `make build` does, with a version and
// commit given to make, and asks the binary for its --version; then builds it plainly and
// finds the commit the Go toolchain stamped from git.
func TestVersionFromTheMakefile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the submit binary")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := exec.Command("make", "-n", "-C", root, "build", "VERSION=v9.8.7-test", "COMMIT=0123abcd").Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	var line string
	for _, l := range strings.Split(string(plan), "\n") {
		if strings.Contains(l, "build") && strings.HasSuffix(strings.TrimSpace(l), "./cmd/submit") {
			line = strings.TrimSpace(l)
		}
	}
	if !strings.Contains(line, "-o bin/submit") {
		t.Fatalf("make build has no `go build ... -o bin/submit ./cmd/submit` line:\n%s", plan)
	}
	bin := filepath.Join(t.TempDir(), "submit")
	build := exec.Command("sh", "-c", strings.Replace(line, "-o bin/submit", "-o "+bin, 1))
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("submit --version: %v", err)
	}
	want := "submit v9.8.7-test (commit 0123abcd, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if string(out) != want {
		t.Errorf("submit --version printed %q, want %q", out, want)
	}

	// Without -ldflags: the commit comes from the VCS stamp (a checkout with git; stamping
	// is asked for, as GOFLAGS may turn it off).
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no git checkout to stamp from: %v", err)
	}
	plain := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/submit")
	plain.Dir = root
	if out, err := plain.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if meta, err := exec.Command("go", "version", "-m", bin).Output(); err != nil || !strings.Contains(string(meta), "vcs.revision=") {
		t.Skipf("the Go toolchain stamped no revision here (%v): nothing to read back", err)
	}
	out, err = exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("submit --version: %v", err)
	}
	re := regexp.MustCompile(`^submit \S+ \(commit ` + strings.TrimSpace(string(head)) + `(, modified)?, go`)
	if !re.Match(out) {
		t.Errorf("plain build: --version printed %q, want the commit %s from the VCS stamp", out, strings.TrimSpace(string(head)))
	}
}
