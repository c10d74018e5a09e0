// Command worker runs LocateAnything detection: one Runner per chip pulls jobs from NATS
// JetStream, fetches images from storage, runs the engine, and stores and publishes the
// results (docs/worker.md). `worker <subcommand>` runs one of the tools below instead.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// subcommand is a tool run as `worker <name> args...`.
type subcommand func(args []string, stdout io.Writer) error

// subcommands lists the tools besides the worker itself.
func subcommands() map[string]subcommand {
	return map[string]subcommand{
		"tokenize": runTokenize,
		"detect":   runDetect,
		"bench":    runBench,
		"smoke":    runSmoke,
	}
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain dispatches and returns the exit code: 0 after a clean run or drain, 1 on a
// failure, 2 on a usage error.
func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] != "run" {
		tools := subcommands()
		if cmd, ok := tools[args[0]]; ok {
			if err := cmd(args[1:], stdout); err != nil {
				fmt.Fprintf(stderr, "worker %s: %v\n", args[0], err)
				return 1
			}
			return 0
		}
		if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			fmt.Fprint(stdout, usage(tools))
			return 0
		}
		fmt.Fprintf(stderr, "worker: unknown subcommand %q\n%s", args[0], usage(tools))
		return 2
	}
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 2
	}
	cfg.Landmarks = stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runWorker(ctx, cfg, log, openEngine); err != nil {
		log.Error("worker failed", "err", err)
		return 1
	}
	return 0
}

func usage(tools map[string]subcommand) string {
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	s := "usage: worker [run]          run the worker (configuration: LA_* variables, docs/worker.md)\n"
	if len(names) > 0 {
		s += "       worker " + strings.Join(names, "|") + " ...\n"
	}
	return s
}
