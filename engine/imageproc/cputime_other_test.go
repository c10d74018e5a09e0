//go:build !linux

package imageproc

import "time"

// processCPU is not measured off Linux; benchmarks then report 0 cpu-ms/op.
func processCPU() time.Duration { return 0 }
