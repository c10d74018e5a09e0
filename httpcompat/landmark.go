package httpcompat

import (
	"fmt"
	"io"
)

// The lines the tt-model launcher watches for in the log, written exactly as uvicorn writes
// them (the launcher matches the text without the level prefix and the full stop).
const (
	StartupCompleteLine = "INFO:     Application startup complete."
	StartupFailedLine   = "ERROR:    Application startup failed. Exiting."
)

// StartupComplete writes the readiness landmark. Call it once, after SetReady succeeded.
func StartupComplete(w io.Writer) error {
	_, err := fmt.Fprintln(w, StartupCompleteLine)
	return err
}

// StartupFailed writes why the engine could not start, then the failure landmark. The caller
// exits non-zero afterwards: there is no CPU fallback for a configured chip backend.
func StartupFailed(w io.Writer, cause error) error {
	_, err := fmt.Fprintf(w, "ERROR:    %v\n%s\n", cause, StartupFailedLine)
	return err
}
