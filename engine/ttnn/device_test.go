package ttnn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDeviceDir: an absent or empty device directory (dot files do not count) is one
// line naming the directory; a node is a chip.
func TestCheckDeviceDir(t *testing.T) {
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, ".hidden"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{empty, filepath.Join(t.TempDir(), "absent")} {
		err := checkDeviceDir(dir)
		var nd *NoDeviceError
		if !errors.As(err, &nd) || nd.Dir != dir {
			t.Fatalf("%s: got %v, want a NoDeviceError", dir, err)
		}
		if want := "no Blackhole device found: no device node in " + dir + "/ ("; !strings.HasPrefix(err.Error(), want) ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %q, want one line starting %q", dir, err, want)
		}
	}
	chip := t.TempDir()
	if err := os.WriteFile(filepath.Join(chip, "0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkDeviceDir(chip); err != nil {
		t.Errorf("a directory with node 0: %v", err)
	}
	for _, adapter := range []string{"la_ttnn_standin", "my_adapter"} {
		if err := (Config{Adapter: adapter}).CheckDevice(); err != nil {
			t.Errorf("adapter %s: %v; the early check is the chip adapter's, another module checks for itself", adapter, err)
		}
	}
}
