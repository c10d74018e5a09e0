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
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	}
	return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)})), nil
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
