package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runPackages are what building and running need on a bare Debian 12 with Go: cgo's
// compiler and headers, pkg-config, OpenBLAS, libjpeg-turbo, git and make.
var runPackages = []string{"gcc", "libc6-dev", "pkg-config", "libopenblas-dev", "libjpeg62-turbo-dev", "git", "make"}

// testOnly are what only the tests use: make run must neither install nor build them.
var testOnly = []string{"versitygw", "python3-uvicorn", "python3-numpy", "libpython", "systemd", "chromium"}

// makeDryRun is what `make -n TARGET` would do, run from the repository root.
func makeDryRun(t *testing.T, target string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on this machine")
	}
	cmd := exec.Command("make", "-n", "--no-print-directory", target)
	cmd.Dir = ".."
	// under make test this is a sub-make: drop what the outer make passes down
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "MAKEFLAGS" && name != "MAKELEVEL" && name != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	return string(out)
}

// TestMakeRunNeedsNothingOfTheTests: `make run` installs the packages building and running
// need, through tools/deps.sh (which waits for a busy apt), builds the worker and submit,
// and runs the worker; nothing only the tests use is installed or built on the way.
func TestMakeRunNeedsNothingOfTheTests(t *testing.T) {
	out := makeDryRun(t, "run")
	var install string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "tools/deps.sh ") {
			install = line
		}
	}
	for _, p := range runPackages {
		if !strings.Contains(" "+install+" ", " "+p+" ") {
			t.Errorf("make run does not install %s: %q", p, install)
		}
	}
	for _, p := range testOnly {
		if strings.Contains(out, p) {
			t.Errorf("make run would install or build %s, which only the tests use:\n%s", p, out)
		}
	}
	for _, want := range []string{"-o bin/worker ./cmd/worker", "-o bin/submit ./cmd/submit"} {
		if !strings.Contains(out, want) {
			t.Errorf("make run does not build %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; last != "bin/worker" {
		t.Errorf("make run ends with %q, want it to run bin/worker", last)
	}

	// make dist packs the binaries and the quick start's scenes
	dist := makeDryRun(t, "dist")
	for _, want := range []string{"bin/worker", "bin/submit", "bin/genscenes", "README.md", "heldout.jsonl", "tar -C dist -czf"} {
		if !strings.Contains(dist, want) {
			t.Errorf("make dist does not pack %q:\n%s", want, dist)
		}
	}

	// make test still installs all of it
	test := makeDryRun(t, "test")
	for _, p := range append(runPackages, testOnly...) {
		if !strings.Contains(test, p) {
			t.Errorf("make test no longer installs %s:\n%s", p, test)
		}
	}
}

// fakeApt puts stand-ins for dpkg-query and apt-get first on PATH: dpkg-query says the
// packages in installed are installed; apt-get logs its arguments, one call a line, and
// fails its first lockedUpdates updates with apt's lock message, or with updateErr.
func fakeApt(t *testing.T, installed []string, lockedUpdates int, updateErr string) (log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "apt.log")
	dpkgQuery := `#!/usr/bin/env bash
for p in ` + strings.Join(installed, " ") + `; do [ "$p" = "${@: -1}" ] && { printf 'install ok installed'; exit 0; }; done
echo "dpkg-query: no packages found matching ${@: -1}" >&2; exit 1
`
	aptGet := `#!/usr/bin/env bash
echo "$*" >> "` + log + `"
if [[ " $* " == *" update "* ]]; then
	n=$(grep -c ' update ' "` + log + `")
	if [ "$n" -le ` + strconv.Itoa(lockedUpdates) + ` ]; then
		echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"; exit 100
	fi
	if [ -n "` + updateErr + `" ]; then echo "` + updateErr + `"; exit 100; fi
fi
`
	for name, script := range map[string]string{"dpkg-query": dpkgQuery, "apt-get": aptGet} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("APT_LOCK_POLL", "0.01")
	return log
}

func deps(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("./deps.sh", args...).CombinedOutput()
	return string(out), err
}

func TestDepsInstallsOnlyWhatIsMissing(t *testing.T) {
	log := fakeApt(t, []string{"a", "b"}, 0, "")
	if out, err := deps(t, "a", "b"); err != nil || out != "" {
		t.Fatalf("all installed: %v, output %q; want silence", err, out)
	}
	if _, err := os.Stat(log); err == nil {
		t.Fatal("all installed, yet apt-get ran")
	}
	out, err := deps(t, "--no-recommends", "a", "c", "b", "d")
	if err != nil {
		t.Fatalf("deps.sh: %v\n%s", err, out)
	}
	calls, _ := os.ReadFile(log)
	want := "-o DPkg::Lock::Timeout=600 update -qq\n-o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends c d\n"
	if string(calls) != want {
		t.Errorf("apt-get calls:\n%s\nwant\n%s", calls, want)
	}
	if !strings.Contains(out, "installing Debian packages: c d") {
		t.Errorf("output %q: want the packages it installs named", out)
	}
}

// TestDepsWaitsForABusyApt: apt-get update meeting another apt's lock is tried again
// until it passes, saying why it waits.
func TestDepsWaitsForABusyApt(t *testing.T) {
	log := fakeApt(t, nil, 3, "")
	out, err := deps(t, "x")
	if err != nil {
		t.Fatalf("deps.sh with apt busy for three tries: %v\n%s", err, out)
	}
	calls, _ := os.ReadFile(log)
	if n := strings.Count(string(calls), " update "); n != 4 {
		t.Errorf("%d updates, want 4 (3 locked, 1 through):\n%s", n, calls)
	}
	if !strings.Contains(string(calls), "install -y -qq x") || !strings.Contains(out, "waiting for another apt to finish") {
		t.Errorf("calls:\n%s\noutput:\n%s\nwant an install after the wait, and the wait said", calls, out)
	}
}

// TestDepsFailsOnOtherErrors: an update that fails for any other reason stops at once with
// apt's message, and installs nothing.
func TestDepsFailsOnOtherErrors(t *testing.T) {
	log := fakeApt(t, nil, 0, "E: The repository is not signed.")
	out, err := deps(t, "x")
	if err == nil || !strings.Contains(out, "The repository is not signed") {
		t.Fatalf("deps.sh: %v, output %q; want a failure quoting apt", err, out)
	}
	calls, _ := os.ReadFile(log)
	if strings.Count(string(calls), "\n") != 1 {
		t.Errorf("apt-get calls:\n%s\nwant the one update and no retry or install", calls)
	}
}

// TestVersionIsReadWhenTheBuildRuns: on a bare machine git arrives with make run's own
// packages, after make has read the Makefile, so the version and commit the binaries are
// linked with must be read when the build's recipe runs (a recursive variable), not when
// the file is read (":="), or the first make run's binaries say "unknown" in --version and
// /info. make's database (-p) prints a variable read at parse time with ":=".
func TestVersionIsReadWhenTheBuildRuns(t *testing.T) {
	db := makeDryRun(t, "-p")
	for _, name := range []string{"LDFLAGS", "DIST"} {
		found := false
		for _, line := range strings.Split(db, "\n") {
			if strings.HasPrefix(line, name+" := ") {
				t.Errorf("%s is expanded when make reads the Makefile: %q", name, line)
			}
			found = found || strings.HasPrefix(line, name+" = ")
		}
		if !found {
			t.Errorf("make's database has no recursive %s", name)
		}
	}
}
