package imagemem

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMachineMemoryReadsMeminfoAndCgroupLimits(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	meminfo := write("meminfo", "MemFree:  100 kB\nMemTotal:       16318284 kB\n")
	if got := memTotal(meminfo); got != 16318284<<10 {
		t.Errorf("MemTotal read as %d", got)
	}
	for text, want := range map[string]int64{
		"max\n":                 0,
		"4294967296\n":          4 << 30,
		"9223372036854771712\n": 0, // cgroup v1's "no limit"
		"garbage":               0,
	} {
		if got := readLimit(write("limit", text)); got != want {
			t.Errorf("limit %q read as %d, want %d", text, got, want)
		}
	}
	if memTotal(filepath.Join(dir, "missing")) != 0 || readLimit(filepath.Join(dir, "missing")) != 0 {
		t.Error("a missing file should read as no limit")
	}
	if got := DefaultSize(); got < MinDefaultSize {
		t.Errorf("DefaultSize %d is below its floor %d", got, MinDefaultSize)
	}
}
