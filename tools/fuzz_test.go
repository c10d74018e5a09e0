// Package tools holds the repository's scripts; this test keeps tools/fuzz.sh honest.
package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGo writes a stand-in for the go command that answers its first `fails` fuzz runs
// with out and exit 1, and then succeeds; it counts its runs in dir/runs.
func fakeGo(t *testing.T, fails int, out string) (bin, runs string) {
	t.Helper()
	dir := t.TempDir()
	runs = filepath.Join(dir, "runs")
	bin = filepath.Join(dir, "go")
	script := `#!/usr/bin/env bash
n=$(( $(cat "` + runs + `" 2>/dev/null || echo 0) + 1 ))
echo $n > "` + runs + `"
if [ $n -le ` + string(rune('0'+fails)) + ` ]; then
	cat <<'OUT'
` + out + `
OUT
	exit 1
fi
echo ok
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, runs
}

func runFuzzScript(t *testing.T, goBin string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "fuzz.sh", "imageproc FuzzDecodeLimits")
	cmd.Env = append(os.Environ(), "GO="+goBin, "FUZZTIME=1s")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func runCount(t *testing.T, runs string) string {
	t.Helper()
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Go 1.26's coordinator race (a bare "context deadline exceeded", no input written) is
// run again and passes; a real finding, which writes its input, fails at once.
func TestFuzzScriptRetriesOnlyTheCoordinatorDeadlineRace(t *testing.T) {
	race := "--- FAIL: FuzzDecodeLimits (5.32s)\n    context deadline exceeded\nFAIL"
	bin, runs := fakeGo(t, 1, race)
	out, err := runFuzzScript(t, bin)
	if err != nil || !strings.Contains(out, "ok    engine/imageproc FuzzDecodeLimits") || runCount(t, runs) != "2" {
		t.Fatalf("the deadline race once: err %v, %s runs, output:\n%s", err, runCount(t, runs), out)
	}

	bin, runs = fakeGo(t, 9, race)
	if out, err := runFuzzScript(t, bin); err == nil || runCount(t, runs) != "3" {
		t.Fatalf("the race every time: err %v after %s runs, want a failure after 3:\n%s", err, runCount(t, runs), out)
	}

	finding := race + "\n    Failing input written to testdata/fuzz/FuzzDecodeLimits/abc\n    context deadline exceeded"
	bin, runs = fakeGo(t, 1, finding)
	if out, err := runFuzzScript(t, bin); err == nil || runCount(t, runs) != "1" {
		t.Fatalf("a real finding: err %v after %s runs, want a failure at once:\n%s", err, runCount(t, runs), out)
	}
}
