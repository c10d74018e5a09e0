package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/config"
)

func TestLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, "json", config.LogInfo)
	log.Debug("hidden")
	log.Info("job ended", "id", "j1", "total_ms", 12.5, "grace", 30*time.Second)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["id"] != "j1" || line["msg"] != "job ended" {
		t.Errorf("json log %q (%v)", buf.String(), err)
	}
	if line["grace"] != "30s" {
		t.Errorf("a duration logged as %v (%T), want \"30s\", not nanoseconds", line["grace"], line["grace"])
	}

	buf.Reset()
	log = newLogger(&buf, "auto", config.LogDebug) // a buffer is not a terminal: JSON
	log.Debug("shown")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Errorf("auto off a terminal wrote %q; want JSON", buf.String())
	}

	buf.Reset()
	log = newLogger(&buf, "text", config.LogWarn)
	log.Info("hidden")
	log.Warn("retry", "id", "j2", "retry_in", 1500*time.Millisecond)
	if out := buf.String(); strings.HasPrefix(out, "{") || !strings.Contains(out, "retry") || !strings.Contains(out, "id=j2") ||
		!strings.Contains(out, "retry_in=1.5s") || strings.Contains(out, "hidden") {
		t.Errorf("text log %q", out)
	}
}
