package main

import (
	"bytes"
	"strings"
	"testing"
)

// The bench itself is tested in package bench; this checks only that the subcommand
// reaches it.
func TestBenchSubcommandRunsBench(t *testing.T) {
	err := runBench([]string{"--weights", ""}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "bench: --weights is required") {
		t.Fatalf("error %v, want bench's missing --weights error", err)
	}
}
