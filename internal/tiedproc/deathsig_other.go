//go:build !linux

package tiedproc

import "os/exec"

// setDeathSignal has no portable equivalent off Linux: callers still stop their children
// themselves (t.Cleanup in tests).
func setDeathSignal(*exec.Cmd) {}
