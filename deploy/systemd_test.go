package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const unitFile = "systemd/la-worker@.service"

// TestSystemdUnitVerifies runs `systemd-analyze verify` on instance la-worker@0 of the
// template, with the example drop-in beside it. verify also requires ExecStart's program
// to exist, so the copy it checks starts a stand-in executable instead of
// /usr/local/bin/la-worker; that one line is the only difference. Any diagnostic fails.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is missing: install it with `apt-get install -y systemd`")
	}
	stand, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	const execStart = "ExecStart=/usr/local/bin/la-worker\n"
	if !strings.Contains(string(unit), execStart) {
		t.Fatalf("%s: no %q line", unitFile, strings.TrimSpace(execStart))
	}
	dir := t.TempDir()
	copyText := strings.Replace(string(unit), execStart, "ExecStart="+stand+"\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "la-worker@.service"), []byte(copyText), 0o644); err != nil {
		t.Fatal(err)
	}
	dropins, err := filepath.Glob("systemd/la-worker@.service.d/*.conf")
	if err != nil || len(dropins) == 0 {
		t.Fatalf("no example drop-in in systemd/la-worker@.service.d (%v)", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "la-worker@.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range dropins {
		data, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "la-worker@.service.d", filepath.Base(d)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(analyze, "verify", "--man=no", filepath.Join(dir, "la-worker@0.service"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify la-worker@0.service: %v\n%s", err, out)
	}
}

// unitSettings reads KEY=VALUE lines of a unit file (later lines win, like systemd's
// single-valued settings; Environment= lines are collected apart).
func unitSettings(t *testing.T, file string) (settings map[string]string, env map[string]string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings, env = map[string]string{}, map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", file, line)
		}
		if k == "Environment" {
			ek, ev, _ := strings.Cut(v, "=")
			env[ek] = ev
			continue
		}
		settings[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return settings, env
}

func TestSystemdUnitSettings(t *testing.T) {
	s, env := unitSettings(t, unitFile)
	want := map[string]string{
		"Restart":             "on-failure",
		"ConditionPathExists": "/dev/tenstorrent/%i",
		"DeviceAllow":         "char-tenstorrent rw",
		"KillMode":            "mixed",
	}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("%s=%q, want %q", k, s[k], v)
		}
	}
	if env["TT_METAL_VISIBLE_DEVICES"] != "%i" || env["LA_CHIPS"] != "1" || env["LA_ENGINE"] != "ttnn" {
		t.Errorf("the instance is not bound to its chip: TT_METAL_VISIBLE_DEVICES=%q LA_CHIPS=%q LA_ENGINE=%q",
			env["TT_METAL_VISIBLE_DEVICES"], env["LA_CHIPS"], env["LA_ENGINE"])
	}
	for _, k := range []string{"LA_DATA_DIR", "TT_METAL_CACHE", "TT_DIT_CACHE_DIR", "TT_CACHE_PATH", "LA_HTTP_ADDR", "LA_METRICS_ADDR"} {
		if !strings.Contains(env[k], "%i") {
			t.Errorf("%s=%q is shared by all chips; want it per chip (%%i)", k, env[k])
		}
	}
	// settings that would hide the chip or its locks from the worker
	for _, k := range []string{"PrivateDevices", "PrivateIPC", "DynamicUser"} {
		if v, ok := s[k]; ok && v != "no" {
			t.Errorf("%s=%s cuts the worker off its chip", k, v)
		}
	}

	stop, err := time.ParseDuration(s["TimeoutStopSec"])
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", s["TimeoutStopSec"], err)
	}
	_, siteEnv := unitSettings(t, "systemd/la-worker@.service.d/10-site.conf")
	for k, v := range siteEnv {
		env[k] = v
	}
	fileEnv := map[string]string{}
	f, err := os.ReadFile("systemd/la-worker.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(f), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			fileEnv[k] = v
			env[k] = v
		}
	}
	if drain := workerDrain(t, env); stop <= drain {
		t.Errorf("TimeoutStopSec %s does not outlast the worker's drain %s", stop, drain)
	}
	checkVariables(t, unitFile+" and its examples", env)
	checkVariables(t, "la-worker.env.example", fileEnv)
}
