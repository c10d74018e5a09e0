package native

import "testing"

func TestMachineProbes(t *testing.T) {
	cp, triad, err := MeasureMemoryBandwidth(4, 2, 1)
	if err != nil || cp <= 0 || triad <= 0 {
		t.Fatalf("bandwidth: copy %g, triad %g, %v", cp, triad, err)
	}
	if _, _, err := MeasureMemoryBandwidth(0, 1, 1); err == nil {
		t.Error("zero-size bandwidth run accepted")
	}
	g, err := MeasureSGEMM(16, 32, 24, 1)
	if err != nil || g <= 0 {
		t.Fatalf("sgemm: %g GFLOP/s, %v", g, err)
	}
	if _, err := MeasureSGEMM(0, 1, 1, 1); err == nil {
		t.Error("empty sgemm accepted")
	}
	if g, err := MeasureMatvec(64, 96, 3, 2, 1); err != nil || g <= 0 {
		t.Fatalf("matvec: %g GB/s, %v", g, err)
	}
	if _, err := MeasureMatvec(0, 96, 3, 2, 1); err == nil {
		t.Error("empty matvec accepted")
	}
	switch isa := KernelISA(); isa {
	case "avx512", "avx2", "generic":
	default:
		t.Errorf("KernelISA %q", isa)
	}
}
