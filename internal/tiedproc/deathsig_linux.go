package tiedproc

import (
	"os/exec"
	"syscall"
)

// setDeathSignal asks the kernel to SIGKILL the child when the forking thread ends.
func setDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
