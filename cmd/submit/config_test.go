package main

import (
	"os"
	"strings"
	"testing"
)

func TestSubmitConfigRefusesTyposAndZeros(t *testing.T) {
	t.Setenv("LA_NATS_ULR", "nats://elsewhere:4222")
	if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), "LA_NATS_ULR: unknown; did you mean LA_NATS_URL?") {
		t.Errorf("a misspelt LA_NATS_URL: %v; want an error with the suggestion (it would silently fall back to 127.0.0.1)", err)
	}
	unset(t, "LA_NATS_ULR")
	t.Setenv("LA_GRACE", "45s") // a worker variable in the same shell is fine
	t.Setenv("LA_NATS_TIMEOUT", "0s")
	if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), "LA_NATS_TIMEOUT") {
		t.Errorf("LA_NATS_TIMEOUT=0s: %v; want an error naming it", err)
	}
	t.Setenv("LA_NATS_TIMEOUT", "3s")
	t.Setenv("LA_MAX_IMAGE_BYTES", "1000")
	c, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.Storage.MaxImageBytes != 1000 {
		t.Errorf("LA_MAX_IMAGE_BYTES read as %d, want 1000 (submit refuses local images the worker would)", c.Storage.MaxImageBytes)
	}
}

// unset removes name for the rest of the test (restored afterwards by t.Setenv).
func unset(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
