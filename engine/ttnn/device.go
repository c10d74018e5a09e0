package ttnn

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// DeviceDir is where the Tenstorrent kernel driver puts a node per chip
// (/dev/tenstorrent/0, ...). la_ttnn_adapter.py looks in the same place.
const DeviceDir = "/dev/tenstorrent"

// ChipAdapter is the adapter module that opens a Blackhole chip (la_ttnn_adapter.py, the
// default LA_TTNN_ADAPTER). CheckDevice speaks for it only: another module (the numpy
// stand-in the tests run, an adapter of one's own) needs what it needs and says so itself.
const ChipAdapter = "la_ttnn_adapter"

// NoDeviceError is CheckDevice's error: the host has no Blackhole chip to run on.
type NoDeviceError struct {
	Dir string // the directory looked in
	Err error  // nil when the directory is empty or absent, else why it could not be read
}

func (e *NoDeviceError) Error() string {
	why := "no device node in " + e.Dir + "/"
	if e.Err != nil {
		why += " (" + e.Err.Error() + ")"
	}
	return "no Blackhole device found: " + why +
		" (the Tenstorrent kernel driver makes one per chip; LA_ENGINE=cpu runs without a chip)"
}

func (e *NoDeviceError) Unwrap() error { return e.Err }

// CheckDevice fails, in one line, when the host has no chip for the adapter to open: no
// node in DeviceDir. The worker asks it before anything else of LA_ENGINE=ttnn (choosing
// or downloading weights, extracting the LLM, LA_DATA_DIR), so a host without a chip says
// just that and writes nothing. It checks for the chip adapter (ChipAdapter; "" counts as
// it, the default) only.
func (c Config) CheckDevice() error {
	if c.Adapter != "" && c.Adapter != ChipAdapter {
		return nil
	}
	return checkDeviceDir(DeviceDir)
}

// checkDeviceDir is CheckDevice on dir: nil when it holds a node (a name not starting with
// a dot), as the adapter's check_device counts them.
func checkDeviceDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return &NoDeviceError{Dir: dir} // no driver loaded
	}
	if err != nil {
		return &NoDeviceError{Dir: dir, Err: fmt.Errorf("reading %s: %w", dir, err)}
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			return nil
		}
	}
	return &NoDeviceError{Dir: dir}
}
