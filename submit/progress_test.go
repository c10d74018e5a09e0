package submit

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressPlainLinesOffATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf}
	p.update(progressSnapshot{Total: 200, Done: 50, Failed: 2, Collected: 50, Elapsed: 10 * time.Second})
	p.finish()
	got := buf.String()
	want := "50/200 done, 2 failed, 5.0/s, ETA 30s\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestProgressBarOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, terminal: true}
	p.update(progressSnapshot{Total: 4, Done: 1, Collected: 1, Elapsed: time.Second, Planning: true})
	p.update(progressSnapshot{Total: 4, Done: 4, Collected: 4, Elapsed: 2 * time.Second})
	p.finish()
	got := buf.String()
	if strings.Count(got, "\r\x1b[K") != 2 || !strings.HasSuffix(got, "\n") {
		t.Fatalf("bar output %q: want two in-place redraws and a final newline", got)
	}
	if !strings.Contains(got, "[######..................] 1/4 done") || !strings.Contains(got, "(still reading inputs)") ||
		!strings.Contains(got, "[########################] 4/4 done, 0 failed, 2.0/s") {
		t.Fatalf("bar output %q", got)
	}
}

func TestSummaryLines(t *testing.T) {
	s := Summary{Total: 10, Submitted: 6, AlreadyDone: 4, Succeeded: 8, Failed: 1, Collected: 5, Elapsed: 2 * time.Second,
		Latencies: []time.Duration{5 * time.Second, 1 * time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}}
	got := s.String()
	want := "6 submitted, 4 already done, 8 succeeded, 1 failed (1 still pending: rerun the same command to resume)\n" +
		"latency p50 3s p95 5s over 5 jobs, throughput 2.50 jobs/s (5 results in 2s)"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
