package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/lmittmann/tint"

	"github.com/locateanything/detect/config"
)

// newLogger builds the process logger: tint's coloured text on a terminal, JSON when
// LA_LOG_FORMAT=json (or auto and not a terminal: log collectors read JSON). Both settings
// are validated with the rest of the configuration (config.Observe).
func newLogger(w io.Writer, format string, level config.LogLevel) *slog.Logger {
	lvl := level.Slog()
	if format == "auto" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: readableDuration}))
	}
	return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: "15:04:05.000",
		NoColor: !isTerminal(w), ReplaceAttr: readableDuration}))
}

// readableDuration writes a duration as Go writes it ("30s", "1.5ms"), in both formats:
// slog's JSON handler would write nanoseconds, a number nobody reads right.
func readableDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// isTerminal reports whether w is a character device (a terminal), without a dependency.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
