package s3test

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server when the test process dies, so a test
// binary stopped by -timeout or a crash leaves no server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
