// Package tiedproc starts a child process that the kernel kills when the starting process
// dies (a test binary stopped by -timeout or a crash), and only then.
//
// Linux's parent-death signal (Pdeathsig) fires when the thread that forked the child
// exits, not the process. The Go runtime ends a thread whenever a goroutine locked to it
// returns without unlocking (the console's low-priority thumbnail thread does exactly
// that), so a child forked from an arbitrary thread can be killed at any moment by
// unrelated code. Start forks from a goroutine locked to its own thread and keeps that
// thread until the child has exited.
package tiedproc

import (
	"os/exec"
	"runtime"
)

// Start starts cmd tied to the life of this process and returns a channel that receives
// cmd.Wait's result once the child has exited: one value (buffered, so a caller that never
// reads it leaks nothing), then the channel is closed. It returns cmd.Start's error if the
// child did not start. Set everything on cmd (Stdout, Env, ...) before calling; do not call
// cmd.Wait yourself.
func Start(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// The thread stays this goroutine's, so it cannot end (and signal the child)
		// before the child does.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		setDeathSignal(cmd)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}
