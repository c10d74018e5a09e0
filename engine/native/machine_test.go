package native

import "testing"

func TestEngineProbes(t *testing.T) {
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
