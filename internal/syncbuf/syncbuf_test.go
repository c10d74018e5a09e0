package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWritesAndReads: run with -race; every write lands whole.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "line\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
}
