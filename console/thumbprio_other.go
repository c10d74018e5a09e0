//go:build !linux

package console

import "time"

// lowerThreadPriority does nothing where a nice value is not per thread.
func lowerThreadPriority() error { return nil }

// processCPUTime is not measured here: 0, so the thumbnail pacer never finds the worker
// busy and thumbnails are not paced.
func processCPUTime() time.Duration { return 0 }

// threadCPUTime is not measured here: 0 (the pacer then never finds the worker busy).
func threadCPUTime() time.Duration { return 0 }
