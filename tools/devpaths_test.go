package tools

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// devPath matches a directory of a development machine written as a fixed path: the
// workspace (/work/), an administrator's or a user's home (/root/, /home/NAME/) and a
// named place under /tmp. A program that needs such a directory asks for it (a flag, a
// variable, os.TempDir, os.UserHomeDir, t.TempDir); a document says "a directory of
// yours" the same way ($TMPDIR, ~), so that what it shows works on the reader's machine.
var devPath = regexp.MustCompile(`(^|[^A-Za-z0-9_.~$}-])(/work/|/root/|/home/[a-z][a-z0-9_-]*/|/tmp/[A-Za-z0-9_.-]+)`)

// devPathAllowed are the files that may name such a path, each for a reason that makes it
// no path of a development machine.
var devPathAllowed = map[string]string{
	"deploy/Dockerfile":            "/root/ is the build container's home (Go's module and build caches)",
	"config/selfcontained_test.go": "it lists /work/ as a name the repository must not contain",
}

// TestNoDevelopmentMachinePaths: no tracked file names a directory of the machine it was
// written on. Tests may pass a /tmp path as a value that is parsed and never opened (a
// flag refused for its form, a command printed by a dry run), so test files are held to
// the workspace and home directories alone.
func TestNoDevelopmentMachinePaths(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on this machine")
	}
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if _, ok := devPathAllowed[name]; ok || name == "tools/devpaths_test.go" {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", name))
		if err != nil || bytes.IndexByte(data, 0) >= 0 {
			continue // deleted in the work tree, or binary
		}
		isTest := strings.HasSuffix(name, "_test.go") || strings.HasPrefix(filepath.Base(name), "test_")
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range devPath.FindAllStringSubmatch(line, -1) {
				if isTest && strings.HasPrefix(m[2], "/tmp/") {
					continue
				}
				t.Errorf("%s:%d names %q, a directory of a development machine: ask for it instead (flag, variable, os.TempDir, ~, $TMPDIR)", name, i+1, m[2])
			}
		}
	}
}

// TestDevPathPattern: the pattern finds the fixed paths and leaves alone what only looks
// like one (a URL's path, a path under the system's temporary directory by variable).
func TestDevPathPattern(t *testing.T) {
	for line, want := range map[string]string{
		"worker bench --weights /tmp/la-random-3b": "/tmp/la-random-3b",
		"cd /work/main && make":                    "/work/",
		`candidates := []string{"/root/go/bin/x"}`: "/root/",
		"LA_HF_CACHE=/home/me/.cache":              "/home/me/",
		"--out $TMPDIR/la-random-3b":               "",
		"--out ${TMPDIR:-/tmp}/x":                  "",
		"https://example.com/tmp/x":                "",
		"~/go/bin/versitygw":                       "",
		"/tmp alone":                               "",
	} {
		got := ""
		if m := devPath.FindStringSubmatch(line); m != nil {
			got = m[2]
		}
		if got != want {
			t.Errorf("%q: found %q, want %q", line, got, want)
		}
	}
}
