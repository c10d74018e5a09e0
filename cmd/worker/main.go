// Command worker runs LocateAnything detection: one Runner per chip pulls jobs from NATS
// JetStream, fetches images from storage, runs the engine, and stores and publishes the
// results, and /predict answers synchronous requests (package worker assembles it all;
// docs/worker.md). `worker <subcommand>` runs one of the tools below instead.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/locateanything/detect/internal/version"
	"github.com/locateanything/detect/worker"
)

// subcommand is a tool run as `worker <name> args...`.
type subcommand func(args []string, stdout io.Writer) error

// usageError is a subcommand error that exits 2: bad flags or configuration.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// subcommands lists the tools besides the worker itself.
func subcommands() map[string]subcommand {
	return map[string]subcommand{
		"config":     runConfig,
		"tokenize":   runTokenize,
		"detect":     runDetect,
		"bench":      runBench,
		"smoke":      runSmoke,
		"preprocess": runPreprocess,
		"loadtest":   runLoadtest,
	}
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain dispatches and returns the exit code: 0 after a clean run or drain, 1 on a
// failure, 2 on a usage or configuration error.
func realMain(args []string, stdout, stderr io.Writer) int {
	tools := subcommands()
	switch {
	case len(args) > 0 && isHelp(args[0]), len(args) > 0 && args[0] == "help":
		fmt.Fprint(stdout, usage(tools))
		return 0
	case len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version"):
		fmt.Fprintln(stdout, version.Get().String("worker"))
		return 0
	case len(args) > 0 && args[0] == "run":
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprint(stdout, usage(tools))
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "worker run: takes no arguments (configuration is LA_* variables), got %q\n", args[1:])
			return 2
		}
	case len(args) > 0:
		cmd, ok := tools[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "worker: unknown subcommand %q\n%s", args[0], usage(tools))
			return 2
		}
		err := cmd(args[1:], stdout)
		var usageErr usageError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &usageErr):
			fmt.Fprintf(stderr, "worker %s: %v\n", args[0], err)
			return 2
		case errors.Is(err, errSmokeFailed):
			return 1
		default:
			fmt.Fprintf(stderr, "worker %s: %v\n", args[0], err)
			return 1
		}
	}
	return runService(stdout, stderr)
}

// runService runs the worker itself until SIGTERM or SIGINT.
func runService(stdout, stderr io.Writer) int {
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	log, err := newLogger(stderr, cfg.Observe.LogFormat, cfg.Observe.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := worker.Run(ctx, cfg, worker.Options{Log: log, Landmarks: stdout, Open: worker.OpenEngine}); err != nil {
		log.Error("worker failed", "err", err)
		return 1
	}
	return 0
}

func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "-help" }

func usage(tools map[string]subcommand) string {
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return "usage: worker [run]          run the worker (configuration: LA_* variables, docs/worker.md)\n" +
		"       worker config        print the effective configuration and where each value came from\n" +
		"       worker " + strings.Join(names, "|") + " ...\n"
}
