package machine

import "testing"

func TestMemoryBandwidth(t *testing.T) {
	for _, threads := range []int{1, 2, 0} {
		cp, triad, err := MemoryBandwidth(4, threads, 1)
		if err != nil || cp <= 0 || triad <= 0 {
			t.Fatalf("%d threads: copy %g, triad %g, %v", threads, cp, triad, err)
		}
	}
	for _, bad := range [][3]int{{0, 1, 1}, {4, -1, 1}, {4, 1, 0}} {
		if _, _, err := MemoryBandwidth(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("MemoryBandwidth(%d MiB, %d threads, %d reps) accepted", bad[0], bad[1], bad[2])
		}
	}
}

func TestSGEMM(t *testing.T) {
	g, err := SGEMM(16, 32, 24, 1)
	if err != nil || g <= 0 {
		t.Fatalf("sgemm: %g GFLOP/s, %v", g, err)
	}
	if _, err := SGEMM(0, 1, 1, 1); err == nil {
		t.Error("empty sgemm accepted")
	}
}
