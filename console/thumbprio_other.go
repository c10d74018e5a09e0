//go:build !linux

package console

// lowerThreadPriority does nothing where a nice value is not per thread.
func lowerThreadPriority() error { return nil }
