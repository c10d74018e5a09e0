// Command submit pushes image sets through the LocateAnything job queue and collects every
// result: `submit run` (the default), `submit status`, `submit batches`, `submit cancel`
// and `submit dlq`; `submit --help` and `submit COMMAND --help` list every flag and
// variable. See docs/submit.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Ctrl-C or SIGTERM ends the run cleanly: what was collected is on disk, and the same
	// command resumes. After the first signal the default handling is restored, so a
	// second one kills the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := Main(ctx, os.Args[1:], IO{
		Stdout:         os.Stdout,
		Stderr:         os.Stderr,
		StderrTerminal: IsTerminal(os.Stderr),
		LoadConfig:     loadConfig,
		Environ:        os.Environ(),
	})
	stop()
	os.Exit(code)
}
