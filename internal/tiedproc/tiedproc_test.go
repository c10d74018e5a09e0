package tiedproc

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestChildOutlivesTheCallersThread starts children from goroutines that then end locked
// to their threads, so the runtime ends those threads (all but the main thread, which it
// parks instead: hence several tries). A child forked from such a thread with a
// parent-death signal would be killed; one started through Start must live on.
func TestChildOutlivesTheCallersThread(t *testing.T) {
	type child struct {
		cmd    *exec.Cmd
		exited <-chan error
		reaped bool // its exit was already received
	}
	var children []*child
	defer func() {
		for _, c := range children {
			_ = c.cmd.Process.Kill()
			if !c.reaped {
				<-c.exited
			}
		}
	}()
	for range 4 {
		started := make(chan error, 1)
		c := &child{}
		go func() {
			runtime.LockOSThread() // never unlocked: this thread ends with the goroutine
			c.cmd = exec.Command("sleep", "60")
			var err error
			c.exited, err = Start(c.cmd)
			started <- err
		}()
		if err := <-started; err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
	}
	time.Sleep(time.Second) // the kernel signals a child as its forking thread ends
	for i, c := range children {
		select {
		case err := <-c.exited:
			c.reaped = true
			t.Fatalf("child %d died with the thread of the goroutine that started it: %v", i, err)
		default:
		}
		if err := c.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("child %d is gone: %v", i, err)
		}
	}
}

// TestWaitResult reports the child's exit status through the channel.
func TestWaitResult(t *testing.T) {
	exited, err := Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	var exitErr *exec.ExitError
	if err := <-exited; err == nil || !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Fatalf("wait: %v; want exit status 3", err)
	}
	if _, err := Start(exec.Command("/nonexistent/binary")); err == nil {
		t.Fatal("a missing binary started")
	}
}
