package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/lmittmann/tint"
)

// newLogger builds the process logger: tint's coloured text on a terminal, JSON when
// LA_LOG_FORMAT=json (or auto and not a terminal: log collectors read JSON).
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	if format == "auto" {
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: readableDuration})), nil
	}
	return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: "15:04:05.000",
		NoColor: !isTerminal(w), ReplaceAttr: readableDuration})), nil
}

// readableDuration writes a duration as Go writes it ("30s", "1.5ms"), in both formats:
// slog's JSON handler would write nanoseconds, a number nobody reads right.
func readableDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("LA_LOG_LEVEL is %q, want debug, info, warn or error", s)
	}
	return l, nil
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
